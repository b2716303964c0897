-- Add the path nodes of _ts_tree_rows that span_paths lacks, numbered after its highest PathId.
-- AttrTried: the attribute regexes the node's AttrMask was taken against (parameter: the derive's,
-- statements.attribute_patterns, at most MASK_BITS), AttrHits those that matched.
INSERT INTO span_paths
SELECT (SELECT coalesce(max(PathId), 0) FROM span_paths) + row_number() OVER (ORDER BY n.Sig) AS PathId,
       n.Sig, n.PSig, n.IsRoot, n.SpanName, n.SpanKind, n.AttrStage, n.FixedRule, n.AttrMask, n.ServerParent,
       $1::VARCHAR[] AS AttrTried,
       CASE WHEN n.AttrMask IS NOT NULL
            THEN list_filter($1::VARCHAR[], lambda p, i: ((n.AttrMask >> (i - 1)) & 1) = 1) END AS AttrHits
FROM (SELECT * FROM temp._ts_tree_rows WHERE Part = 'node'
      QUALIFY row_number() OVER (PARTITION BY Sig ORDER BY SpanName) = 1) AS n
ANTI JOIN span_paths AS p ON p.Sig = n.Sig
