-- A refresh's histogram delta (histogram.py gives its name and the table's rows statement over the
-- scope, sign -1 for the rows taken away): a temporary table the merge adds to the histogram. Params: sign.
CREATE OR REPLACE TEMP TABLE {delta} AS {rows}
