-- Spans of one trace in one run, as ../trace_span_count.sql. {scope}: the run's selection. Param: trace.
SELECT count() FROM {scope} WHERE TraceId = {trace:String}
