-- Distinct non-empty services, routes and instances of request roots (p1: run, or NULL).
SELECT arraySort(groupUniqArrayIf(toString(ServiceName), ServiceName != '')),
       arraySort(groupUniqArrayIf(toString(Route), Route != '')),
       arraySort(groupUniqArrayIf(toString(Instance), Instance != ''))
FROM tailscope_requests
WHERE RunLabel = coalesce({p1:Nullable(String)}, RunLabel)
