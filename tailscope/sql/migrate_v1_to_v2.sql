-- Schema version 1 -> 2, in place (tailscope.store.migrate runs it in one transaction, statement by
-- statement): otel_traces' attribute maps and event/link lists become JSON text of the same content,
-- in the form schema.sql describes and the decoders write (event times as ns since the epoch).
-- Nothing else changes: runs, stage rules and the derived rows stay as they are.
ALTER TABLE otel_traces ALTER ResourceAttributes SET DATA TYPE VARCHAR
    USING CAST(to_json(coalesce(ResourceAttributes, MAP {})) AS VARCHAR);
ALTER TABLE otel_traces ALTER SpanAttributes SET DATA TYPE VARCHAR
    USING CAST(to_json(coalesce(SpanAttributes, MAP {})) AS VARCHAR);
ALTER TABLE otel_traces ALTER Events SET DATA TYPE VARCHAR
    USING CAST(to_json(list_transform(coalesce(Events, []), lambda e: {
        'Timestamp': epoch_ns(e.Timestamp), 'Name': e.Name, 'Attributes': coalesce(e.Attributes, MAP {})
    })) AS VARCHAR);
ALTER TABLE otel_traces ALTER Links SET DATA TYPE VARCHAR
    USING CAST(to_json(list_transform(coalesce(Links, []), lambda l: {
        'TraceId': l.TraceId, 'SpanId': l.SpanId, 'TraceState': l.TraceState,
        'Attributes': coalesce(l.Attributes, MAP {})
    })) AS VARCHAR);
UPDATE schema_version SET version = 2;
