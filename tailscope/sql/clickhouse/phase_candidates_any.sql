-- Whether a run has any span the phase rules could read (an attribute or start event they name):
-- runs without serving-framework spans then skip phase_spans.sql, which costs ~0.6 s per 1 M spans
-- even when it finds nothing. The exporter's bloom filter indexes on mapKeys(SpanAttributes) let
-- most granules be skipped. {scope}: the run's selection. Params: ph_attribute_keys, ph_event_keys.
SELECT count() FROM (
    SELECT 1 FROM {scope} AS t
    WHERE hasAny(mapKeys(SpanAttributes), {ph_attribute_keys:Array(String)})
       OR hasAny(`Events.Name`, {ph_event_keys:Array(String)})
    LIMIT 1
)
