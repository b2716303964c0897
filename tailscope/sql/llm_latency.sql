-- LLM latency per run: end-to-end, time to first token (TTFT), time per output token (TPOT) and
-- tokens in / out, as percentiles over the filtered requests that report them. The values come from
-- the attributes LLM servers put on a request's span: vLLM's gen_ai.latency.* (seconds) and
-- gen_ai.usage.* (vllm/tracing.py), OpenTelemetry's GenAI conventions (gen_ai.server.*,
-- gen_ai.usage.input_tokens / output_tokens), TGI's generate span (time_per_token, "12.3ms" text).
-- TPOT, when no span reports it, is decode time / (output tokens - 1), as vLLM's own metric defines it.
-- Only spans whose attributes mention "token" are read. Values in ms and tokens.
WITH f AS (
    SELECT RunLabel, TraceId, Duration FROM requests WHERE {where}
),
spans AS (
    SELECT o.RunLabel, o.TraceId, o.SpanAttributes AS A
    FROM otel_traces AS o JOIN f ON o.RunLabel = f.RunLabel AND o.TraceId = f.TraceId
    WHERE contains(o.SpanAttributes, 'token')
),
parsed AS (
    SELECT RunLabel, TraceId,
           1e3 * coalesce(try_cast(A->>'gen_ai.latency.time_to_first_token' AS DOUBLE),
                          try_cast(A->>'gen_ai.server.time_to_first_token' AS DOUBLE)) AS ttft_ms,
           1e3 * try_cast(A->>'gen_ai.server.time_per_output_token' AS DOUBLE) AS tpot_reported_ms,
           -- TGI: Rust Duration text, e.g. "21.4ms" or "850µs"
           try_cast(regexp_extract(A->>'time_per_token', '^\s*([0-9.eE+-]+)\s*([a-zµμ]+)\s*$', 1) AS DOUBLE)
               * CASE regexp_extract(A->>'time_per_token', '^\s*([0-9.eE+-]+)\s*([a-zµμ]+)\s*$', 2)
                     WHEN 'ns' THEN 1e-6 WHEN 'us' THEN 1e-3 WHEN 'µs' THEN 1e-3 WHEN 'μs' THEN 1e-3
                     WHEN 'ms' THEN 1 WHEN 's' THEN 1e3 END AS tpot_text_ms,
           1e3 * try_cast(A->>'gen_ai.latency.time_in_model_decode' AS DOUBLE) AS decode_ms,
           coalesce(try_cast(A->>'gen_ai.usage.input_tokens' AS DOUBLE),
                    try_cast(A->>'gen_ai.usage.prompt_tokens' AS DOUBLE),
                    try_cast(A->>'prompt_tokens' AS DOUBLE)) AS tokens_in,
           coalesce(try_cast(A->>'gen_ai.usage.output_tokens' AS DOUBLE),
                    try_cast(A->>'gen_ai.usage.completion_tokens' AS DOUBLE),
                    try_cast(A->>'generated_tokens' AS DOUBLE)) AS tokens_out
    FROM spans
),
per_request AS (
    SELECT f.RunLabel, f.Duration / 1e6 AS e2e_ms,
           max(p.ttft_ms) AS ttft_ms,
           max(coalesce(p.tpot_reported_ms, p.tpot_text_ms,
                        CASE WHEN p.tokens_out > 1 THEN p.decode_ms / (p.tokens_out - 1) END)) AS tpot_ms,
           max(p.tokens_in) AS tokens_in,
           max(p.tokens_out) AS tokens_out
    FROM f JOIN parsed AS p ON p.RunLabel = f.RunLabel AND p.TraceId = f.TraceId
    GROUP BY f.RunLabel, f.TraceId, f.Duration
)
SELECT RunLabel, metric, count(v) AS requests, quantile_cont(v, [0.5, 0.9, 0.99]) AS q
FROM (
    SELECT RunLabel, 'end to end (ms)' AS metric, 1 AS o, e2e_ms AS v FROM per_request
    UNION ALL SELECT RunLabel, 'time to first token (ms)', 2, ttft_ms FROM per_request
    UNION ALL SELECT RunLabel, 'time per output token (ms)', 3, tpot_ms FROM per_request
    UNION ALL SELECT RunLabel, 'tokens in', 4, tokens_in FROM per_request
    UNION ALL SELECT RunLabel, 'tokens out', 5, tokens_out FROM per_request
)
GROUP BY RunLabel, metric, o
HAVING count(v) > 0
ORDER BY RunLabel, o
