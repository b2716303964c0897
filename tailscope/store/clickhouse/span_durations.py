"""Each run's span durations by name on ClickHouse (tailscope_span_durations), what the Gantt ranks a
span against: "slower than N % of the run's spans with this name".

Ranking against the run's spans in otel_traces reads the name, duration and resource attributes (the
run's filter) of every span of the run: 3.0 s of the Gantt's 3.6 s at 10 M spans on chdb. The table
keeps (run, name, duration) sorted, so a rank reads only the durations of the trace's span names.
It is filled where the run's rows are derived (write.refresh_run, overlap: derive_durations.sql,
window by window) or, for `collect`, where its spans arrive (durations_fresh.sql), and forgotten with
the run's derived rows. A store made before the table existed gets its derived runs' durations on
first open (`ensure`); a run without any (defined, never derived) is ranked from otel_traces as
before (`ranks` returns None)."""

from __future__ import annotations

from typing import Any

from tailscope import sql
from tailscope.store import span_ranks
from tailscope.store.clickhouse.statements import RunSelection, Statement, run_scope, strip_comments
from tailscope.store.clickhouse.store import ClickHouseClient
from tailscope.store.errors import TableMissingError

TABLE = "tailscope_span_durations"
NEW = "_tailscope_span_durations_new"  # filled by the migration before it takes the name


def _load(name: str) -> str:
    return sql.load(name, dialect="clickhouse")


# A Gantt rank's part for one span name compares each row with at most this many durations (a name
# asked about more often gets several parts).
RANK_DURATIONS_PER_PART = 32
RankParts = dict[int, tuple[str, list[int]]]


def rank_statement(
    run: str, names: list[str], durations: list[int], bucketed: bool = False
) -> tuple[Statement, RankParts]:
    """The Gantt's ranks against tailscope_span_durations: one gantt_rank_name.sql part per span name
    (and per RANK_DURATIONS_PER_PART of its distinct durations), joined with UNION ALL; and what
    each part j asks: (span name, its durations, in the order of the part's counts). `bucketed`: the
    durations are span_ranks buckets, compared with each row's (clickhouse/span_bucket.sql)."""
    column = strip_comments(_load("span_bucket")).strip() if bucketed else "Duration"
    asked: dict[str, list[int]] = {}
    for name, duration in zip(names, durations, strict=True):
        values = asked.setdefault(name, [])
        if int(duration) not in values:
            values.append(int(duration))
    template = strip_comments(_load("gantt_rank_name"))
    texts: list[str] = []
    params: dict[str, Any] = {"run": run}
    parts: RankParts = {}
    for name, values in asked.items():
        for start in range(0, len(values), RANK_DURATIONS_PER_PART):
            j = len(texts) + 1
            chunk = values[start : start + RANK_DURATIONS_PER_PART]
            parts[j] = (name, chunk)
            params[f"n{j}"] = name
            params.update({f"d{j}_{k}": value for k, value in enumerate(chunk, start=1)})
            less = ", ".join(f"countIf({column} < {{d{j}_{k}:Int64}})" for k in range(1, len(chunk) + 1))
            equal = ", ".join(f"countIf({column} = {{d{j}_{k}:Int64}})" for k in range(1, len(chunk) + 1))
            texts.append(template.replace("{less}", less).replace("{equal}", equal).replace("{j}", str(j)))
    return ("\nUNION ALL\n".join(texts), params), parts


def has_run(store: ClickHouseClient, run: str) -> bool:
    return bool(store.query(_load("durations_has_run"), {"run": run}).single_value())


def forget_run(store: ClickHouseClient, run: str) -> None:
    """A run's durations gone (none: no delete, a lightweight delete costs ~1 s however little)."""
    if has_run(store, run):
        store.query(_load("durations_forget"), {"run": run}, store.write_limit_s)


def add_fresh(store: ClickHouseClient, run: str) -> None:
    """The spans of a receiver flush new to `run` (dedupe's _ts_fresh) added to its durations."""
    store.query(_load("durations_fresh"), {"run": run}, store.write_limit_s)


def ensure(store: ClickHouseClient) -> None:
    """The table, created when missing. A store made before it existed has runs derived without it:
    a new table under another name gets their durations from otel_traces first and then takes the
    name, so an interrupted migration leaves the store as it was (and is done again next time)."""
    if store.query(_load("durations_table_exists")).single_value():
        return
    store.query(_load("durations_drop_new"), {"table": NEW})
    store.query(_load("tailscope_span_durations_ddl"), {"table": NEW})
    for run, start, end, filters in store.query(_load("durations_backfill_runs")).rows:
        selection = RunSelection(int(start), int(end), dict(filters))
        text = _load("durations_backfill").replace("{scope}", run_scope(len(selection.filters)))
        store.query(text, {"table": NEW, "run": run, **selection.params()}, store.write_limit_s)
    store.query(_load("durations_rename"), {"table": NEW})


def ranks(
    store: ClickHouseClient, run: str, names: list[str], durations: list[int]
) -> dict[int, float] | None:
    """Each span's duration rank (0..100, ties counted half) among the run's spans of its name, by
    1-based position in `names` / `durations` (a name the run has no span of: no entry); None when
    the run has no durations (defined, never derived; or a reader of a store not migrated yet). A
    run of at least span_ranks.MIN_SPANS spans is ranked by buckets, as DuckDB ranks it (the
    span's bucket counted half: within span_ranks.error_bound of the exact rank)."""
    try:
        spans = int(store.query(_load("durations_run_count"), {"run": run}).single_value())
    except TableMissingError:
        return None
    if not spans:
        return None
    if not names:
        return {}
    bucketed = spans >= span_ranks.MIN_SPANS
    asked = [span_ranks.bucket(int(d)) for d in durations] if bucketed else durations
    (text, params), parts = rank_statement(run, names, asked, bucketed)
    counts: dict[tuple[str, int], tuple[int, int, int]] = {}
    for j, n, less, equal in store.query(text, params).rows:
        name, values = parts[int(j)]
        for value, below, same in zip(values, less, equal, strict=True):
            counts[(name, value)] = (int(n), int(below), int(same))
    out: dict[int, float] = {}
    for i, key in enumerate(zip(names, (int(d) for d in asked), strict=True), start=1):
        n, below, same = counts.get(key, (0, 0, 0))
        if n:
            out[i] = 100.0 * (below + 0.5 * same) / n
    return out
