-- Whether any of the filtered requests stands for more or fewer than itself (requests.Weight <> 1:
-- a head-sampled run): the views then read their *_weighted.sql versions, else the unweighted ones,
-- whose figures (quantile_cont) and speed are what they were before weights existed.
SELECT EXISTS (SELECT 1 FROM requests WHERE ({where}) AND Weight <> 1)
