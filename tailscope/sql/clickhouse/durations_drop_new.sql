-- A new durations table a migration left unfinished (span_durations.ensure). Param: table.
DROP TABLE IF EXISTS {table:Identifier}
