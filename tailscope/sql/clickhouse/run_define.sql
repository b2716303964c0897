-- Define (or redefine) a run as a selection of otel_traces (tailscope_runs_ddl.sql).
INSERT INTO tailscope_runs (RunLabel, StartNs, EndNs, Filters, SourceFiles, LoadedAt, SetupAttributes, Version)
VALUES ({run:String}, {start:Int64}, {end:Int64}, {filters:Map(String, String)}, {files:Array(String)},
        now64(3), {setup:Map(String, String)}, toUnixTimestamp64Nano(now64(9)))
