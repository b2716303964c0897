-- The highest hash(TraceId) among the stage breakdown's sampled requests (_ts_scope): above the
-- derive's cut (statements.SPAN_TIMES_MAX_HASH) some of them keep no SpanTimes, and the breakdown
-- reads the sample's spans without looking for them first.
SELECT max(hash(TraceId)) FROM _ts_scope
