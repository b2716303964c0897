-- A run's histogram rows added to a histogram table (histogram.py gives the table and its rows
-- statement, histogram_*_rows.sql, over the run's requests or a refresh's scope). Params: the rows'.
INSERT INTO {table} BY NAME {rows}
