-- Keep the derived traces' per-path rows (param: run), ordered by the request's start so that a
-- refresh's delete (derive_paths_delete_scope.sql) skips row groups by StartNs, and by TK so that
-- the request key is run-length encoded.
INSERT INTO request_paths
SELECT ? AS RunLabel, q.StartNs, p.TK, n.PathId, p.Ns
FROM (SELECT TK, Sig, Ns FROM temp._ts_tree_rows WHERE Part = 'path') AS p
-- (a root's earliest start, as derive_requests.sql's Timestamp, should its span id repeat)
JOIN (SELECT TK, min(StartNs) AS StartNs FROM temp._ts_tree_rows WHERE Part = 'request' GROUP BY TK) AS q
    ON q.TK = p.TK
JOIN span_paths AS n ON n.Sig = p.Sig
ORDER BY q.StartNs, p.TK
