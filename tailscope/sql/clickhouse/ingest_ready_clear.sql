-- Empty the loader's converted-spans table after its file moved into otel_traces (or was rejected).
TRUNCATE TABLE {ready:Identifier}
