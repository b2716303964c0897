-- The run a trace belongs to (the first by label when several hold it), from the derived requests.
-- Param: trace.
SELECT min(toString(RunLabel)) FROM tailscope_requests WHERE TraceId = {trace:String} HAVING count() > 0
