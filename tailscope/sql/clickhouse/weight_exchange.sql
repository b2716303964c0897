-- The filled migration's table takes tailscope_requests' name (and the old table its own), at once.
EXCHANGE TABLES tailscope_requests AND _tailscope_requests_new
