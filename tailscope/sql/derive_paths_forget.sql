-- Drop every path node (a rule edit that re-derives every run from its spans refills them).
DELETE FROM span_paths
