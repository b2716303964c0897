-- The rows a refresh added, into its histogram delta (sign +1). Params: sign.
INSERT INTO temp.{delta} BY NAME {rows}
