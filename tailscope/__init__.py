"""tailscope: where the latency budget of online ML inference goes, from OpenTelemetry traces."""

__version__ = "0.1.0"
