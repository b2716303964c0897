-- tail_selection.sql with the tail threshold given (tail_block_rows.sql: the one tail_block_counts.sql
-- found), so the selection is marked without a quantile over every filtered request, and only the
-- filtered requests whose roots start in one of {parts} (time ranges, fixed SQL with `?` bounds) are
-- read: DuckDB skips the others' row groups by their Timestamp range.
-- Params after the filter's and the ranges': the threshold (ns, NULL for a rectangle), use_rect,
-- rect start, end, stage ('' for e2e), low ns, stage again, high ns.
WITH f AS (
    SELECT * FROM requests WHERE {where} AND ({parts})
),
q AS (
    SELECT CAST(? AS DOUBLE) AS qd
),
{include:tail_marked}
)
