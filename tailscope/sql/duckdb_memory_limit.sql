-- The connection's memory limit as DuckDB prints it (e.g. '953.6 MiB'): threads.fit_threads reads it.
SELECT current_setting('memory_limit')
