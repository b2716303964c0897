-- A run's span and trace counts as recorded in its runs row. $1: run label.
SELECT SpanCount, TraceCount FROM runs WHERE RunLabel = $1
