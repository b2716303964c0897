-- Whether any span in the store carries an attribute llm_latency.sql reads (its keys, as written
-- there): without one every LLM metric is empty and the view has nothing to show, so the scan of
-- every request's span attributes is skipped. The exporter's bloom filter index on
-- mapKeys(SpanAttributes) lets ClickHouse skip the granules without any of them (10 M spans without
-- LLM attributes: a read of the index, not of the maps).
SELECT count() FROM (
    SELECT 1 FROM otel_traces
    WHERE hasAny(mapKeys(SpanAttributes), [
        'gen_ai.latency.time_to_first_token', 'gen_ai.server.time_to_first_token',
        'gen_ai.server.time_per_output_token', 'time_per_token', 'gen_ai.latency.time_in_model_decode',
        'gen_ai.usage.input_tokens', 'gen_ai.usage.prompt_tokens', 'prompt_tokens',
        'gen_ai.usage.output_tokens', 'gen_ai.usage.completion_tokens', 'generated_tokens'])
    LIMIT 1
)
