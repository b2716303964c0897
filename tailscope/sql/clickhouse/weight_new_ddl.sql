-- The migration's table: tailscope_requests' columns and order (a store made before Weight), then Weight.
CREATE TABLE _tailscope_requests_new AS tailscope_requests
