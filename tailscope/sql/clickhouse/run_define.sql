-- Define (or redefine) a run as a selection of otel_traces (tailscope_runs_ddl.sql). Maps travel as
-- two arrays (keys, values): clickhouse-connect writes a dict parameter as JSON, which ClickHouse
-- does not read as a Map.
INSERT INTO tailscope_runs (RunLabel, StartNs, EndNs, Filters, SourceFiles, LoadedAt, SetupAttributes, Version)
VALUES ({run:String}, {start:Int64}, {end:Int64}, mapFromArrays({filter_keys:Array(String)}, {filter_values:Array(String)}), {files:Array(String)},
        now64(3), mapFromArrays({setup_keys:Array(String)}, {setup_values:Array(String)}), toUnixTimestamp64Nano(now64(9)))
