-- A run's span count and longest span (ns): how many time windows a derive takes, and how far
-- around a window its traces' spans can start (a request's spans start within its root's
-- duration of each other). {scope}: the run's selection.
SELECT count(), max(toInt64(Duration)) FROM {scope} AS s
