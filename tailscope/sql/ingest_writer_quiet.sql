-- No DuckDB progress bar from the loader's long statements: it would write into the CLI's output.
SET enable_progress_bar = false
