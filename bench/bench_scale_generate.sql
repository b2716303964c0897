-- bench/bench_scale.py's span generator (issue 29).
-- One run's requests [?, ? + ?) as 11 spans each; params: first request number, run label, slow-tail
-- probability of the forward pass, how many requests. Request i starts at i ms (1,000 requests/s).
INSERT INTO otel_traces
WITH req AS (
    SELECT i,
           md5(i::VARCHAR) AS trace_id,  -- random-looking, as real trace ids: no zone map finds one
           $2 AS run,
           CAST(1700000000000000000 + i * 1000000 AS BIGINT) AS t0,
           hash(i) AS h,
           CAST(200000 + random() * 100000 AS BIGINT) AS d_recv,
           CAST(300000 + random() * 200000 AS BIGINT) AS d_parse,
           CAST(1000000 + random() * 500000 + CASE WHEN random() < 0.05 THEN 30000000 ELSE 0 END AS BIGINT)
               AS d_hyd,
           CAST(500000 + random() * 500000 AS BIGINT) AS d_tok,
           CAST(random() * 3000000 AS BIGINT) AS d_queue,
           CAST(15000000 + random() * 5000000 + CASE WHEN random() < $3 THEN 100000000 ELSE 0 END AS BIGINT)
               AS d_fwd,
           CAST(500000 + random() * 300000 AS BIGINT) AS d_post,
           CAST(200000 + random() * 100000 AS BIGINT) AS d_ser
    FROM range($1, $1 + $4) AS r(i)
),
slots AS (
    SELECT *,
           '/v1/models/m' || (h % 2000)::VARCHAR || '/predict' AS route,
           'u' || ((h >> 11) % 5000)::VARCHAR AS user_id,
           'api-' || ((h >> 24) % 24)::VARCHAR AS instance,
           'gpu-node-' || ((h >> 24) % 24 // 3)::VARCHAR AS host,
           t0 + 100000 AS s_recv,
           t0 + 100000 + d_recv AS s_parse,
           t0 + 100000 + d_recv + d_parse AS s_hyd,
           t0 + 100000 + d_recv + d_parse + d_hyd AS s_tok,
           t0 + 100000 + d_recv + d_parse + d_hyd + d_tok AS s_queue,
           t0 + 100000 + d_recv + d_parse + d_hyd + d_tok + d_queue AS s_fwd,
           t0 + 100000 + d_recv + d_parse + d_hyd + d_tok + d_queue + d_fwd AS s_post,
           t0 + 100000 + d_recv + d_parse + d_hyd + d_tok + d_queue + d_fwd + d_post AS s_ser,
           d_recv + d_parse + d_hyd + d_tok + d_queue + d_fwd + d_post + d_ser + 200000 AS d_root
    FROM req
),
spans AS (
    SELECT trace_id, run, route, user_id, instance, host, d_hyd > 20000000 AS miss, u.* FROM slots,
    LATERAL (VALUES
        (0, -1, 'POST', 'Client', 'loadgen', '', t0 - 50000, d_root + 100000),
        (1, 0, 'POST', 'Server', 'inference-api', 'ingress', t0, d_root),
        (2, 1, 'http.receive', 'Internal', 'inference-api', 'ingress', s_recv, d_recv),
        (3, 1, 'parse_request', 'Internal', 'inference-api', 'parsing', s_parse, d_parse),
        (4, 1, 'feature_hydration', 'Internal', 'inference-api', 'feature_hydration', s_hyd, d_hyd),
        (5, 4, 'feature_store.get', 'Client', 'feature-store', 'feature_hydration', s_hyd + 100000,
            d_hyd - 200000),
        (6, 1, 'tokenize', 'Internal', 'inference-api', 'preprocessing', s_tok, d_tok),
        (7, 1, 'batch.queue_wait', 'Internal', 'inference-api', 'queue', s_queue, d_queue),
        (8, 1, 'model.forward', 'Internal', 'ranker', 'model_forward', s_fwd, d_fwd),
        (9, 1, 'postprocess', 'Internal', 'inference-api', 'postprocessing', s_post, d_post),
        (10, 1, 'serialize_response', 'Internal', 'inference-api', 'serialization', s_ser, d_ser)
    ) AS u(slot, parent, name, kind, service, stage, start_ns, dur)
)
SELECT
    make_timestamp_ns(start_ns), trace_id, lpad(format('{:x}', slot + 1), 16, '0'),
    CASE WHEN parent < 0 THEN '' ELSE lpad(format('{:x}', parent + 1), 16, '0') END,
    '', CASE WHEN slot <= 1 THEN name || ' ' || route ELSE name END, kind, service,
    '{"service.instance.id":"' || instance || '","host.name":"' || host || '","tailscope.scenario":"scale"}',
    'bench', '1',
    CASE WHEN slot = 0 THEN '{"http.request.method":"POST","enduser.id":"' || user_id || '"}'
         WHEN slot = 1 THEN '{"http.request.method":"POST","http.route":"' || route
                            || '","enduser.id":"' || user_id || '","http.response.status_code":"200"}'
         WHEN slot = 4 THEN '{"tailscope.stage":"' || stage || '","cache.hit":"'
                            || CASE WHEN miss THEN 'false' ELSE 'true' END || '"}'
         ELSE '{"tailscope.stage":"' || stage || '"}' END,
    dur, 'Unset', '', '[]', '[]', run
FROM spans
