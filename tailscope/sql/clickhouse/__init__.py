"""ClickHouse-dialect statements (ClickHouse server through clickhouse-connect, or chdb in process).

Same rule as the parent folder: one statement per file, values as `{name:Type}` server-side
parameters, never formatted into the text.
"""
