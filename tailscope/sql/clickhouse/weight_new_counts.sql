-- Rows in tailscope_requests and in the filled migration's table: the same before the exchange.
SELECT (SELECT count() FROM tailscope_requests), (SELECT count() FROM _tailscope_requests_new)
