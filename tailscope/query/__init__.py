"""What the analysis asks the store: the request filter and bands (filters.py). The statements
themselves are named files of tailscope/sql that each store engine loads in its own dialect."""
