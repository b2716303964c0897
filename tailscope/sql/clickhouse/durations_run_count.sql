-- How many span durations a run has (0: none, a run defined and never derived), what decides whether
-- the Gantt ranks its spans by buckets (tailscope.store.span_ranks.MIN_SPANS). Parameter: run.
SELECT count() FROM tailscope_span_durations WHERE RunLabel = {run:String}
