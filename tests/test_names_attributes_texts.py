"""diagnosis_names_attributes.sql parses each distinct attribute text once and joins its pairs back to
the spans that carry it: the rows equal, as a multiset, those of the statement that parsed every
span's text (kept here as the reference), on texts repeated within and across names, a duplicate key,
no attributes, an error status, a long value, and two texts whose DuckDB hash is the same."""

from __future__ import annotations

from collections import Counter

from analysis_spans import S, SpanColumns, add_trace, load

from tailscope import sql
from tailscope.store.duckdb.connection import connect_writer
from tailscope.store.duckdb.store import DuckDBStore as Store

# the statement before: json_each on every span's text
PER_SPAN = """
WITH s AS (
    SELECT SpanName, CAST(hash(TraceId, SpanId) >> 1 AS BIGINT) AS SpanKey, SpanAttributes, StatusCode
    FROM otel_traces WHERE RunLabel = $run AND list_contains($span_names, SpanName)
      AND {windows}
)
SELECT s.SpanName, s.SpanKey, kv.key AS AttrKey, kv.value ->> '$' AS AttrValue
FROM s, json_each(s.SpanAttributes) AS kv
WHERE length(kv.value ->> '$') <= 64
UNION ALL
SELECT SpanName, SpanKey, 'otel.status_code' AS AttrKey, 'Error' AS AttrValue
FROM s WHERE StatusCode = 'Error'
"""

# two texts of a simulated run whose DuckDB hash(...) is the same (a join by hash would swap them)
COLLIDING = (
    '{"cache.name":"candidates","candidates.segment":"seg-0018","candidates.count":"706",'
    '"candidates.source":"caffeine"}',
    '{"cache.name":"candidates","candidates.segment":"seg-0078","candidates.count":"906",'
    '"candidates.source":"caffeine"}',
)
TEXTS = {  # span name -> the text each of its spans carries, in turn
    "route": ['{"http.route":"/a","code":"200"}', '{"http.route":"/b","code":"200"}'],
    "db": ['{"http.route":"/a","code":"200"}', '{"db.system":"pg","n":3,"ok":true,"o":{"x":1}}'],
    "cache": list(COLLIDING),
    "dup": ['{"k":"1","k":"2"}'],
    "long": ['{"short":"v","long":"' + "x" * 80 + '"}'],
    "none": ["{}"],
}


def _store(path) -> None:
    cols = SpanColumns()
    for i in range(8):
        children = [S(name, 1, 5 + j, status="Error" if (i + j) % 5 == 0 else "Unset")
                    for j, name in enumerate(TEXTS)]
        add_trace(cols, S("root", 0, 20, kind="Server", children=children), i + 1, offset_ms=i * 30)
    load(path, "r", cols)
    with connect_writer(path) as conn:
        for name, texts in TEXTS.items():
            spans = conn.execute(
                "SELECT SpanId FROM otel_traces WHERE SpanName = ? ORDER BY Timestamp, SpanId", [name]
            ).fetchall()
            for k, (span_id,) in enumerate(spans):
                conn.execute("UPDATE otel_traces SET SpanAttributes = ? WHERE SpanId = ?",
                             [texts[k % len(texts)], span_id])


def _rows(path, text: str | None = None) -> Counter:
    original = sql.load
    if text is not None:
        sql.load = lambda name: text if name == "diagnosis_names_attributes" else original(name)
    try:
        with Store(path).reading() as reader:
            table = reader.span_table("diagnosis_names_attributes", "r", span_names=[*TEXTS, "root"])
    finally:
        sql.load = original
    columns = ("SpanName", "SpanKey", "AttrKey", "AttrValue")
    return Counter(zip(*(table.column(c).to_pylist() for c in columns), strict=True))


def test_each_text_parsed_once_gives_the_rows_of_every_span_parsed(db_path) -> None:
    _store(db_path)
    with connect_writer(db_path) as conn:  # the premise: the two texts' hashes are equal
        assert conn.execute("SELECT hash(?) = hash(?)", list(COLLIDING)).fetchall()[0][0]
    got, expected = _rows(db_path), _rows(db_path, PER_SPAN)
    assert got == expected
    assert sum(got.values()) > 60
    assert {key for _, _, key, _ in got} >= {"http.route", "db.system", "otel.status_code", "k", "short"}
    assert not any(key == "long" for _, _, key, _ in got)  # a value over 64 characters is skipped
    assert sum(1 for (name, _, key, _) in got.elements() if name == "dup" and key == "k") == 16
