"""Build a TraceFrame for one run from the store: one read of plain columns (the store's span_table),
ids and names dictionary-encoded by pyarrow, parents joined in numpy, stages from the analysis
layer's mapping."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from tailscope.analysis.diagnosis import sample
from tailscope.analysis.diagnosis.frame import SPAN_KINDS, TraceFrame, build_frame
from tailscope.analysis.diagnosis.gc_stamps import pause_starts
from tailscope.analysis.diagnosis.retry_events import retry_source
from tailscope.analysis.diagnosis.sample import DEFAULT_MAX_SPANS, SamplePlan
from tailscope.store.ahead import ahead as _ahead
from tailscope.store.interface import Reader
from tailscope.store.sample_plan import MAPPING_TRACES
from tailscope.vocabulary import ALL_STAGES


def _codes(column: pa.ChunkedArray) -> tuple[np.ndarray, list[str]]:
    """Integer codes and their values, numbered by first appearance in the column's order (whatever
    order a dictionary-encoded column's dictionary was built in: the codes must not depend on the
    order the engine returned the rows in)."""
    enc = pc.dictionary_encode(column).combine_chunks()
    codes = enc.indices.to_numpy(zero_copy_only=False).astype(np.int64)
    values = enc.dictionary.to_pylist()
    if len(codes) == 0:
        return codes, values
    first = np.full(len(values), len(codes), np.int64)
    first[codes[::-1]] = np.arange(len(codes) - 1, -1, -1)  # the earliest row of each code wins
    if (np.diff(first) > 0).all() and first[-1] < len(codes):
        return codes, values
    by_appearance = np.argsort(first, kind="stable")
    by_appearance = by_appearance[first[by_appearance] < len(codes)]
    renumber = np.full(len(values), -1, np.int64)
    renumber[by_appearance] = np.arange(len(by_appearance))
    return renumber[codes], [values[i] for i in by_appearance.tolist()]


def _any_codes(column: pa.ChunkedArray) -> tuple[np.ndarray, list[Any]]:
    """Integer codes and their values in whatever order the dictionary was built (for groupings whose
    order does not matter: _codes' renumbering by first appearance costs a pass more)."""
    enc = pc.dictionary_encode(column).combine_chunks()
    return enc.indices.to_numpy(zero_copy_only=False).astype(np.int64), enc.dictionary.to_pylist()


def _arrow(conn: Reader, name: str, run: str, **params: Any) -> pa.Table:
    """A named span read over one run as an Arrow table (the store's span_table), in a fixed order."""
    return _in_fixed_order(conn.span_table(name, run, **params))


def _in_fixed_order(
    table: pa.Table, start: np.ndarray | None = None, keep: np.ndarray | None = None
) -> pa.Table:
    """The spans in (start, trace id, span id) order, whatever order the engine returned them in (or
    the writer wrote them in): the detectors' samples and null draws follow the span order, so a run
    gets the same diagnosis on every engine and from every load (diagnosis_spans.sql). `start`: the
    StartNs to use instead (a sample's moved times), `keep`: the rows to keep (one take does both)."""
    if "OrderTraceId" not in table.column_names:
        return table
    if start is not None:
        table = table.set_column(table.schema.get_field_index("StartNs"), "StartNs", pa.array(start))
    order = pa.array(_fixed_order(table, keep))
    columns = {}
    for name in table.column_names:
        if name in ("OrderTraceId", "OrderSpanId"):
            continue
        column = table.column(name).combine_chunks()
        if pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
            # permute codes, not strings (a take of every string column was 1 M spans' costliest step)
            column = pc.dictionary_encode(column)
        columns[name] = column.take(order)
    return pa.table(columns)


def _fixed_order(table: pa.Table, keep: np.ndarray | None) -> np.ndarray:
    """The rows (those `keep` keeps) in (StartNs, OrderTraceId, OrderSpanId) order, ties in row order:
    by start in numpy, and only the runs of equal starts (a child starting with its parent) by their
    ids in Arrow (an Arrow sort of every row by the three keys took 4x the time)."""
    start = table.column("StartNs").to_numpy()
    rows = np.arange(len(start)) if keep is None else np.nonzero(keep)[0]
    order = rows[np.argsort(start[rows], kind="stable")]
    same = start[order][1:] == start[order][:-1]
    tied = np.r_[same, False] | np.r_[False, same]
    if tied.any():
        tied_rows = order[tied]
        run = np.cumsum(np.r_[True, ~same][tied])  # which run of equal starts each tied row is in
        ids = pa.table({"run": run, "trace": table.column("OrderTraceId").take(tied_rows),
                        "span": table.column("OrderSpanId").take(tied_rows)})
        keys = [("run", "ascending"), ("trace", "ascending"), ("span", "ascending")]
        order[tied] = tied_rows[pc.sort_indices(ids, sort_keys=keys).to_numpy()]
    return order


def _match(keys: np.ndarray, wanted: np.ndarray) -> np.ndarray:
    """Row of `keys` holding each `wanted` key (-1 where none). A hash index (pandas) when the keys
    are unique, as they are after the loader's dedupe; else one sort and a binary search."""
    if len(keys) == 0:
        return np.full(len(wanted), -1, np.int64)
    index = pd.Index(keys)
    if index.is_unique:
        return index.get_indexer(wanted).astype(np.int64)
    order = np.argsort(keys, kind="stable")
    sorted_keys = keys[order]
    needles = np.argsort(wanted, kind="stable")  # sorted needles: a cache-friendly search
    pos = np.empty(len(wanted), np.int64)
    pos[needles] = np.searchsorted(sorted_keys, wanted[needles])
    pos = np.minimum(pos, len(keys) - 1)
    return np.where(sorted_keys[pos] == wanted, order[pos], -1).astype(np.int64)


def list_runs(conn: Reader) -> list[str]:
    return [row[0] for row in conn.run("diagnosis_runs").fetchall()]


def _stages(
    table: pa.Table, mapping: pd.DataFrame | None, names: tuple[np.ndarray, list[str]],
    kinds: tuple[np.ndarray, list[str]],
) -> np.ndarray:
    """Stage code per span: the analysis layer's mapping when it is available, else the explicit
    `tailscope.stage` attribute (NO_STAGE where neither says). `names`, `kinds`: the spans' name and
    kind codes with their values (_codes)."""
    lookup = {s: i for i, s in enumerate(ALL_STAGES)}
    codes, values = _codes(table.column("StageAttr"))
    attr = np.array([lookup.get(v, -1) for v in values] or [-1], np.int64)[codes]
    mapped = _mapped_stages(mapping, names, kinds)
    return attr if mapped is None else np.where(mapped >= 0, mapped, attr)


def _stage_mapping(conn: Reader, run: str, plan: SamplePlan | None) -> pd.DataFrame | None:
    """The analysis layer's stage mapping (rules in force, over a sample of the run's traces), None
    where it is unavailable (an older store without rules: attributes only)."""
    try:
        from tailscope.analysis.stages import stage_mapping

        window = plan.read_windows()[0] if plan is not None else None  # a sample: its first window
        # (the scope sample_plan.mapping_scope names: the one a whole derive records, kept_mapping.py)
        return stage_mapping(conn, run, sample_traces=MAPPING_TRACES, window=window)
    except Exception:
        return None


def _mapped_stages(
    mapping: pd.DataFrame | None, names: tuple[np.ndarray, list[str]], kinds: tuple[np.ndarray, list[str]]
) -> np.ndarray | None:
    """The stage mapping per (span name, span kind), -1 for a pair it did not see (its spans fall back
    to their attribute)."""
    if mapping is None or mapping.empty:
        return None
    lookup = {s: i for i, s in enumerate(ALL_STAGES)}
    best = mapping.sort_values("spans", ascending=False).drop_duplicates(["span_name", "span_kind"])
    pair_stage = {
        (str(n), str(k)): lookup.get(str(st), -1)
        for n, k, st in zip(best["span_name"], best["span_kind"], best["stage"], strict=True)
    }
    (name_codes, name_values), (kind_codes, kind_values) = names, kinds
    pair_code = np.array(
        [[pair_stage.get((str(n), str(k)), -1) for k in kind_values] for n in name_values] or [[-1]], np.int64
    ).reshape(max(len(name_values), 1), max(len(kind_values), 1))
    return pair_code[name_codes, kind_codes]


def load_frame(conn: Reader, run: str, max_spans: int | None = DEFAULT_MAX_SPANS) -> TraceFrame:
    """The run's spans as a TraceFrame (empty frame when the run has no spans). A run of more than
    `max_spans` spans is read as a sample of time windows (sample.py; None or 0: always whole)."""
    plan = _plan(conn, run, max_spans)
    # the reads that do not wait for the spans', answered beside the span read and its numpy work
    mapping = _ahead(conn, lambda reader: _stage_mapping(reader, run, plan))
    windows = None if plan is None else plan.windows()
    gc_read = _ahead(conn, lambda reader: reader.span_table("diagnosis_gc_events", run, windows=windows))
    scan_windows = None  # where the frame's spans start (a sample: its windows up to its last span)
    if plan is None:
        table, gc, cut = _arrow(conn, "diagnosis_spans", run), _in_fixed_order(gc_read.get()), 0
    else:
        table, gc, cut, scan_windows = _sampled(conn, run, plan, gc_read.get)
    n = table.num_rows
    trace_keys = table.column("TraceKey").to_numpy()
    trace = pd.factorize(trace_keys)[0].astype(np.int64)  # hash-based: no sort
    name, names = _codes(table.column("SpanName"))
    span_keys = table.column("SpanKey").to_numpy().astype(np.int64)
    counts = np.bincount(name, minlength=len(names)).tolist() if n else [0] * len(names)
    # the names' attributes (the detectors ask for most of them): read from now on, beside the rest
    name_spans = dict(zip(names, counts, strict=True))
    attribute_source = _attribute_source(conn, run, span_keys, plan, name_spans, scan_windows)
    service, services = _codes(table.column("ServiceName"))
    instance, instances = _codes(table.column("Instance"))
    kind_codes, kind_values = _codes(table.column("SpanKind"))
    kind_map = np.array([SPAN_KINDS.index(k) if k in SPAN_KINDS else 0 for k in kind_values] or [0])
    kind = kind_map[kind_codes] if n else np.zeros(0, np.int64)
    parent_keys = table.column("ParentKey").to_numpy().astype(np.int64)
    parent = _match(span_keys, parent_keys)
    parent[(parent_keys == -1) | (parent == np.arange(n))] = -1

    start_abs = table.column("StartNs").to_numpy().astype(np.int64)
    t0 = int(start_abs.min()) if n else 0
    frame = TraceFrame(
        run=run, trace=trace, parent=parent, name=name, names=names, kind=kind,
        service=service, services=services, instance=instance, instances=instances,
        start=start_abs - t0,
        dur=np.maximum(table.column("Duration").to_numpy().astype(np.int64), 0),
        stage=_stages(table, mapping.get(), (name, names), (kind_codes, kind_values)) if n else kind,
        t0=t0,
    )
    frame.sample, frame.cut_requests = plan, cut
    rows = conn.run("diagnosis_setup", {"run": run}).fetchall()
    row = rows[0] if rows else None
    if row and row[0]:
        frame.setup = {str(k): str(v) for k, v in dict(row[0]).items()}
    if gc.num_rows:
        lookup = {v: i for i, v in enumerate(instances)}
        frame.gc_instance = np.array([lookup.get(v, -1) for v in gc.column("Instance").to_pylist()], np.int64)
        frame.gc_time = gc.column("TimeNs").to_numpy().astype(np.int64) - t0
        frame.gc_dur = gc.column("DurationNs").to_numpy().astype(np.int64)
        # an event stamped when the runtime heard of the pause, after it ended: moved to its start
        frame.gc_time, _ = pause_starts(frame.gc_instance, frame.gc_time, frame.gc_dur, frame.instance,
                                        frame.start + frame.dur)
    frame.attribute_source, frame.retry_source = attribute_source, retry_source(conn, run, span_keys, plan,
                                                                                _match)
    if (frame.kind == SPAN_KINDS.index("Consumer")).any():  # a queue consumer's links to its messages
        frame.link_from, frame.link_to = _links(conn, run, span_keys, plan)
    frame = build_frame(frame)
    if frame.requests is not None and len(frame.requests):
        frame.requests.weight = request_weights(conn, run, trace_keys[frame.requests.root])
    return frame


def request_weights(conn: Reader, run: str, root_trace_keys: np.ndarray) -> np.ndarray | None:
    """Each request's weight (diagnosis_weights.sql: the derived requests' Weight where it is not 1,
    by trace), None when every request stands for itself (no sampling: nothing more is read)."""
    table = conn.span_table("diagnosis_weights", run)
    if table.num_rows == 0:
        return None
    keys = pd.Series(table.column("Weight").to_numpy(), index=table.column("TraceKey").to_numpy())
    keys = keys[~keys.index.duplicated()]
    found = keys.index.get_indexer(root_trace_keys)
    return np.where(found >= 0, keys.to_numpy()[np.maximum(found, 0)], 1.0)


def _plan(conn: Reader, run: str, max_spans: int | None) -> SamplePlan | None:
    """The sample to read the run from, or None to read it whole."""
    if not max_spans:
        return None
    extent = conn.span_table("diagnosis_extent", run)
    spans, first, last = (extent.column(c)[0].as_py() for c in ("Spans", "FirstNs", "LastNs"))
    if not spans or spans <= max_spans:
        return None
    return sample.plan(int(spans), int(first), int(last), max_spans)


def _sampled(
    conn: Reader, run: str, plan: SamplePlan, gc_events: Callable[[], pa.Table]
) -> tuple[pa.Table, pa.Table, int, list[tuple[int, int]]]:
    """The spans of the requests that start in each window (read a margin further), and the GC events
    inside the windows (`gc_events`: their read), moved so that the windows lie end to end (sample.py),
    in the fixed order; how many of the requests read were still running at their window's margin
    (cut short); and the read windows cut after the last span kept (what a later read needs)."""
    table = conn.span_table("diagnosis_spans", run, windows=plan.read_windows())
    start = table.column("StartNs").to_numpy().astype(np.int64)
    group = pd.factorize(table.column("TraceKey").to_numpy())[0]
    first = np.full(int(group.max(initial=-1)) + 1, np.iinfo(np.int64).max)
    np.minimum.at(first, group, start)  # each trace's first span start (a pandas groupby: 15x the time)
    trace_start = first[group]
    window = plan.window_at(trace_start)
    keep = window >= 0  # the request started in a window, not in a margin
    ends = start + table.column("Duration").to_numpy().astype(np.int64)
    read_end = plan.read_end(np.maximum(window, 0))
    cut = len(np.unique(group[keep & (ends > read_end)]))
    moved = start - plan.shifts()[np.maximum(window, 0)]
    gc = gc_events()
    times = gc.column("TimeNs").to_numpy().astype(np.int64)
    gc_window = plan.window_at(times)
    gc = gc.filter(pa.array(gc_window >= 0))
    moved_gc = pa.array(times[gc_window >= 0] - plan.shifts()[gc_window[gc_window >= 0]])
    gc = gc.set_column(gc.schema.get_field_index("TimeNs"), "TimeNs", moved_gc)
    return _in_fixed_order(table, moved, keep), gc, cut, plan.read_windows_to(start[keep])


def _links(
    conn: Reader, run: str, span_keys: np.ndarray, plan: SamplePlan | None
) -> tuple[np.ndarray, np.ndarray]:
    """(linking span, linked span) indices of the CONSUMER spans' links whose both ends were read
    (diagnosis_links.sql), in a fixed order."""
    windows = None if plan is None else plan.read_windows()
    table = conn.span_table("diagnosis_links", run, windows=windows)
    src = _match(span_keys, table.column("SpanKey").to_numpy().astype(np.int64))
    dst = _match(span_keys, table.column("LinkKey").to_numpy().astype(np.int64))
    keep = (src >= 0) & (dst >= 0)
    order = np.lexsort((dst[keep], src[keep]))
    return src[keep][order], dst[keep][order]


# the most spans of one name the attribute reads take (diagnosis_span_attributes.sql's limit)
NAME_SPANS = 50_000


def _attribute_source(
    conn: Reader,
    run: str,
    span_keys: np.ndarray,
    plan: SamplePlan | None = None,
    name_spans: dict[str, int] | None = None,
    scan_windows: list[tuple[int, int]] | None = None,
) -> Callable[[str], dict[str, tuple[np.ndarray, list[Any]]]]:
    """A function: span name -> {attribute key: (span indices, values)}. Queried lazily, while the
    connection is open (the runner asks only for the names a detector needs); from the sample's
    windows only where the frame is a sample. The first ask for a name with at most NAME_SPANS
    spans in the frame (`name_spans`) reads every such name in one scan (detectors ask for most of
    a run's names: one scan per name was the diagnosis' largest read), over `scan_windows` where
    given (a sample's windows up to its last span: its margins' other spans unread); a name the scan
    found more spans of (spans outside the frame), and a larger name, are read alone, under the
    statement's limit."""
    windows = None if plan is None else plan.read_windows()
    small = sorted(n for n, count in (name_spans or {}).items() if count <= NAME_SPANS)
    batch: dict[str, dict[str, tuple[np.ndarray, list[Any]]] | None] = {}
    scan = None
    if small and len(span_keys):  # started now: read and sorted by name while the frame is built and
        # the first detectors run (beside them, where the store reads two statements at once)
        def read_scan(reader: Reader) -> dict[str, dict[str, tuple[np.ndarray, list[Any]]] | None]:
            at = {"windows": scan_windows or windows, "span_names": small}
            return _by_name(reader.span_table("diagnosis_names_attributes", run, **at), span_keys, NAME_SPANS)

        scan = _ahead(conn, read_scan)

    def alone(span_name: str) -> dict[str, tuple[np.ndarray, list[Any]]]:
        table = _arrow(conn, "diagnosis_span_attributes", run, windows=windows, span_name=span_name)
        return _by_key(table, span_keys)

    def attributes(span_name: str) -> dict[str, tuple[np.ndarray, list[Any]]]:
        if len(span_keys) == 0:
            return {}
        if scan is not None and not batch:
            batch.update({n: {} for n in small})
            batch.update(scan.get())
        found = batch.get(span_name)
        return found if found is not None else alone(span_name)

    return attributes


def _by_key(table: pa.Table, span_keys: np.ndarray) -> dict[str, tuple[np.ndarray, list[Any]]]:
    """{attribute key: (span indices, values)} of one name's attribute rows, in the rows' order."""
    if table.num_rows == 0:
        return {}
    one = table.append_column("SpanName", pa.array(np.zeros(table.num_rows, np.int8)))
    return _by_name(one, span_keys).get(0, {})


def _by_name(
    table: pa.Table, span_keys: np.ndarray, over: int | None = None
) -> dict[Any, dict[str, tuple[np.ndarray, list[Any]]] | None]:
    """The attribute rows of one or more names (SpanName) as {name: {attribute key: (span indices,
    values)}}; rows of spans the frame lacks are left out (a key only they carry stays, empty). A
    name with rows of more than `over` spans: None."""
    if table.num_rows == 0:
        return {}
    idx = _match(span_keys, table.column("SpanKey").to_numpy().astype(np.int64))
    name_codes, names = _any_codes(table.column("SpanName"))  # the output's order is set below
    key_codes, keys = _any_codes(table.column("AttrKey"))
    group = name_codes * len(keys) + key_codes
    # each key's rows in span order (the frame's), the rows of spans the frame lacks last, ties in the
    # rows' order: one stable sort of (group, span) (the engine's row order varies from read to read,
    # this does not)
    span = np.where(idx >= 0, idx, len(span_keys))
    order = np.argsort(group * (len(span_keys) + 1) + span, kind="stable")
    value_codes, distinct = _any_codes(table.column("AttrValue"))  # a string made once per distinct value
    values = np.array([*distinct, None], dtype=object)[value_codes[order]]
    idx, group = idx[order], group[order]
    cuts = np.nonzero(np.diff(group))[0] + 1
    starts, ends = np.r_[0, cuts], np.r_[cuts, len(group)]
    runs = sorted(  # per name, its keys by the first span that has them
        (int(g) // len(keys), int(i) if i >= 0 else len(span_keys), keys[int(g) % len(keys)], lo, hi)
        for g, i, lo, hi in zip(group[starts], idx[starts], starts.tolist(), ends.tolist(), strict=True)
    )
    out: dict[Any, dict[str, tuple[np.ndarray, list[Any]]] | None] = {}
    if over is not None:  # names with rows of more spans than that (a share of them outside the frame)
        rows = np.bincount(name_codes, minlength=len(names))
        span_key = table.column("SpanKey").to_numpy()
        for c in np.nonzero(rows > over)[0].tolist():  # more rows than that: count the spans
            if len(pd.unique(span_key[name_codes == c])) > over:
                out[names[c]] = None
    for name, _, key, lo, hi in runs:
        if names[name] in out and out[names[name]] is None:
            continue
        found = idx[lo:hi] >= 0  # a key whose spans the frame lacks stays, empty (as before)
        out.setdefault(names[name], {})[key] = (idx[lo:hi][found], list(values[lo:hi][found]))
    return out
