-- DuckDB draws a progress bar on stderr for long statements: not ours to print (a per-connection setting).
SET enable_progress_bar = false
