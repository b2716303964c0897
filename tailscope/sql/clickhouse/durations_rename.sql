-- The filled new durations table (span_durations.ensure) under its name. Param: table.
RENAME TABLE {table:Identifier} TO tailscope_span_durations
