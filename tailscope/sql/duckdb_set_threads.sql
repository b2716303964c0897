-- One worker thread per slice of the memory limit (threads.fit_threads).
SET threads = ?
