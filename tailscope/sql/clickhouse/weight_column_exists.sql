-- Whether tailscope_requests has its Weight column (a store made before it: requests_weight.ensure).
SELECT count() > 0 FROM system.columns
WHERE database = currentDatabase() AND table = 'tailscope_requests' AND name = 'Weight'
