-- One span name's part of the Gantt's ranks on ClickHouse (span_durations.rank_statement joins one per
-- name with UNION ALL): how many of the run's spans of that name there are, and for each duration
-- asked about how many are shorter and how many equal ({counts}: fixed SQL, `countIf(Duration <
-- {d<j>_<k>:Int64}), countIf(Duration = ...)` pairs). The table's order (run, name, duration) reads
-- only that name's rows. Placeholders {j}: the name's number; parameters run, n<j>, d<j>_<k>.
SELECT {j} AS j, count() AS n, [{less}] AS less, [{equal}] AS equal
FROM tailscope_span_durations
WHERE RunLabel = {run:String} AND SpanName = {n{j}:String}
