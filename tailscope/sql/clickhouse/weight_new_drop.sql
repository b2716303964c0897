-- The migration's table (requests_weight.ensure), dropped before it is filled and after the exchange.
DROP TABLE IF EXISTS _tailscope_requests_new
