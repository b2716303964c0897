-- LLM latency per run, as ../llm_latency.sql: end-to-end, time to first token (TTFT), time per output
-- token (TPOT) and tokens in / out over the filtered requests that report them, from the attributes
-- of their traces' spans (Map SpanAttributes; a missing key reads '', which is no number). Only spans
-- whose attribute keys or values mention "token" are read (DuckDB: its JSON text does). Instead of
-- quantile_cont's p50 / p90 / p99, the two order statistics each reads ([x[floor h], x[ceil h]],
-- h = (n - 1)·q), interpolated by tailscope.analysis.quantiles. Values in ms and tokens.
WITH f AS (
    SELECT toString(RunLabel) AS RunLabel, TraceId, Duration FROM tailscope_requests WHERE {where}
),
runs AS (  -- the filtered runs' selections: a span is its run's when the selection holds it, as
           -- DuckDB's RunLabel says (two runs may hold traces with the same ids)
    SELECT RunLabel, StartNs, EndNs, Filters FROM tailscope_runs FINAL
    WHERE RunLabel IN (SELECT DISTINCT RunLabel FROM f)
),
spans AS (
    SELECT r.RunLabel AS RunLabel, o.TraceId AS TraceId, o.SpanAttributes AS A
    FROM (
        SELECT TraceId, Timestamp, ResourceAttributes, SpanAttributes
        FROM otel_traces
        WHERE TraceId IN (SELECT TraceId FROM f)
          AND arrayExists(x -> position(x, 'token') > 0, arrayConcat(mapKeys(SpanAttributes), mapValues(SpanAttributes)))
    ) AS o
    CROSS JOIN runs AS r
    WHERE toUnixTimestamp64Nano(o.Timestamp) BETWEEN r.StartNs AND r.EndNs
      AND arrayAll((k, v) -> o.ResourceAttributes[k] = v, mapKeys(r.Filters), mapValues(r.Filters))
),
parsed AS (
    SELECT RunLabel, TraceId,
           1e3 * coalesce(toFloat64OrNull(A['gen_ai.latency.time_to_first_token']),
                          toFloat64OrNull(A['gen_ai.server.time_to_first_token'])) AS ttft_ms,
           1e3 * toFloat64OrNull(A['gen_ai.server.time_per_output_token']) AS tpot_reported_ms,
           -- TGI: Rust Duration text, e.g. "21.4ms" or "850µs"
           toFloat64OrNull(regexpExtract(A['time_per_token'], '^\\s*([0-9.eE+-]+)\\s*([a-zµμ]+)\\s*$', 1))
               * CASE regexpExtract(A['time_per_token'], '^\\s*([0-9.eE+-]+)\\s*([a-zµμ]+)\\s*$', 2)
                     WHEN 'ns' THEN 1e-6 WHEN 'us' THEN 1e-3 WHEN 'µs' THEN 1e-3 WHEN 'μs' THEN 1e-3
                     WHEN 'ms' THEN 1 WHEN 's' THEN 1e3 END AS tpot_text_ms,
           1e3 * toFloat64OrNull(A['gen_ai.latency.time_in_model_decode']) AS decode_ms,
           coalesce(toFloat64OrNull(A['gen_ai.usage.input_tokens']),
                    toFloat64OrNull(A['gen_ai.usage.prompt_tokens']),
                    toFloat64OrNull(A['prompt_tokens'])) AS tokens_in,
           coalesce(toFloat64OrNull(A['gen_ai.usage.output_tokens']),
                    toFloat64OrNull(A['gen_ai.usage.completion_tokens']),
                    toFloat64OrNull(A['generated_tokens'])) AS tokens_out
    FROM spans
),
per_request AS (
    SELECT f.RunLabel AS RunLabel, f.Duration / 1e6 AS e2e_ms,
           max(p.ttft_ms) AS ttft_ms,
           max(coalesce(p.tpot_reported_ms, p.tpot_text_ms,
                        if(p.tokens_out > 1, p.decode_ms / (p.tokens_out - 1), NULL))) AS tpot_ms,
           max(p.tokens_in) AS tokens_in,
           max(p.tokens_out) AS tokens_out
    FROM f INNER JOIN parsed AS p ON p.TraceId = f.TraceId AND p.RunLabel = f.RunLabel
    GROUP BY f.RunLabel, f.TraceId, f.Duration
)
SELECT RunLabel, metric, length(s) AS requests,
       arrayMap(q -> [s[toUInt64(floor((length(s) - 1) * q)) + 1], s[toUInt64(ceil((length(s) - 1) * q)) + 1]],
                [0.5, 0.9, 0.99]) AS q
FROM (
    SELECT RunLabel, metric, o, arraySort(groupArray(v)) AS s
    FROM (
        SELECT RunLabel, 'end to end (ms)' AS metric, 1 AS o, CAST(e2e_ms, 'Nullable(Float64)') AS v
        FROM per_request
        UNION ALL SELECT RunLabel, 'time to first token (ms)', 2, CAST(ttft_ms, 'Nullable(Float64)')
        FROM per_request
        UNION ALL SELECT RunLabel, 'time per output token (ms)', 3, CAST(tpot_ms, 'Nullable(Float64)')
        FROM per_request
        UNION ALL SELECT RunLabel, 'tokens in', 4, CAST(tokens_in, 'Nullable(Float64)') FROM per_request
        UNION ALL SELECT RunLabel, 'tokens out', 5, CAST(tokens_out, 'Nullable(Float64)') FROM per_request
    )
    GROUP BY RunLabel, metric, o
)
WHERE length(s) > 0
ORDER BY RunLabel, o
