-- What if: the refusals a span's events report, as ../whatif_retry_events.sql, from the exporter's
-- Nested Events columns: per event the span (SpanKey matches diagnosis_spans.sql), its time (ns after
-- the span's start) and
-- the wait it asked for (ns: the first key naming a retry-after, seconds unless it ends in ms).
-- {scope}: the run's selection. Param: span_name.
SELECT SpanKey, OffsetNs,
       toInt64(round(toFloat64OrNull(ev_attributes[after_key]) * if(match(lower(after_key), 'ms$'), 1e6, 1e9)))
           AS WaitNs
FROM (
    SELECT toInt64(bitShiftRight(cityHash64(TraceId, SpanId), 1)) AS SpanKey,
           toUnixTimestamp64Nano(ev_time) - toUnixTimestamp64Nano(Timestamp) AS OffsetNs, ev_attributes,
           arrayFirst(k -> match(lower(k), 'retry[._-]?after'), mapKeys(ev_attributes)) AS after_key
    FROM {scope}
    ARRAY JOIN `Events.Timestamp` AS ev_time, `Events.Attributes` AS ev_attributes
    WHERE SpanName = {span_name:String}
)
WHERE after_key != '' AND toFloat64OrNull(ev_attributes[after_key]) > 0
