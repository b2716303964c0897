"""Load trace files into the store: one file = one transaction, streamed in batches.

For each file: open → undo whole-file compression → detect the format → decode batches of spans →
append each batch to `otel_traces` through Arrow → drop duplicate (TraceId, SpanId) within the run →
refresh the `runs` row and the derived tables → commit. Any failure before the commit (a decode
error in strict mode, a crash, kill -9) leaves the store as it was before that file.
"""

from __future__ import annotations

import contextlib
import os
import re
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
import pyarrow as pa

from ingest import detect, otlp_fast, otlp_proto, otlp_proto_fast
from ingest.arrow_batch import ArrowSpans
from ingest.columns import SpanColumns
from ingest.compression import open_decompressed
from ingest.errors import DecodeError
from ingest.parallel import PARALLEL_MIN_BYTES, DecodePool, decode_on_workers
from ingest.run_row import trace_count, update_run
from ingest.setup import setup_attributes
from ingest.touched import TouchedTraces
from tailscope import sql
from tailscope.analysis.derive import refresh_run, trace_window
from tailscope.store.connection import WriterConnection
from tailscope.store.db import connect_writer

# Rows per INSERT: DuckDB's row group. Every INSERT but a file's last appends whole row groups: a
# transaction's appends are written to the file as they go (optimistic writes), and an INSERT that
# ends inside a row group leaves a partial one that the commit then rewrites (measured, 1 M spans in
# inserts of 130,000 rows: commit 1.06 s and a 74 MB file, against 0.28 s and 50 MB in whole groups).
INSERT_ROWS = 122_880
_COMPRESSED_SUFFIXES = (".gz", ".gzip", ".zst", ".zstd")

Progress = Callable[[int, int, int], None]  # (bytes read, bytes total, spans decoded so far)


@dataclass
class StoreStats:
    """What one `store_batches` call did."""

    spans_decoded: int = 0
    spans_stored: int = 0  # net new rows after duplicates were dropped
    run_spans: int = 0  # the run's totals afterwards
    run_traces: int = 0

    @property
    def duplicates(self) -> int:
        return self.spans_decoded - self.spans_stored


@dataclass
class FileResult:
    path: str
    format: str | None = None
    compression: str | None = None
    spans: int = 0  # stored
    duplicates: int = 0
    rejected: int = 0  # records skipped (--skip-bad)
    reasons: Counter[str] = field(default_factory=Counter)
    error: str | None = None  # set when the whole file was rejected (store unchanged for it)
    run_traces: int | None = None  # traces in the run after this file committed
    seconds: float = 0.0


@dataclass
class LoadSummary:
    run_label: str
    files: list[FileResult] = field(default_factory=list)
    traces: int = 0  # traces in the run after loading
    seconds: float = 0.0

    @property
    def spans(self) -> int:
        return sum(f.spans for f in self.files)

    @property
    def rejected(self) -> int:
        return sum(f.rejected for f in self.files)

    @property
    def failed(self) -> list[FileResult]:
        return [f for f in self.files if f.error is not None]

    @property
    def reasons(self) -> Counter[str]:
        total: Counter[str] = Counter()
        for f in self.files:
            total.update(f.reasons)
        return total

    def as_dict(self) -> dict[str, Any]:
        return {
            "run": self.run_label,
            "files": len(self.files),
            "files_failed": len(self.failed),
            "spans": self.spans,
            "traces": self.traces,
            "duplicates": sum(f.duplicates for f in self.files),
            "rejected": self.rejected,
            "rejected_reasons": dict(self.reasons.most_common()),
            "seconds": round(self.seconds, 3),
            "spans_per_second": round(self.spans / self.seconds) if self.seconds > 0 else None,
            "errors": [f.error for f in self.failed],
            "per_file": [
                {
                    "path": f.path,
                    "format": f.format,
                    "compression": f.compression,
                    "spans": f.spans,
                    "duplicates": f.duplicates,
                    "rejected": f.rejected,
                    "error": f.error,
                    "seconds": round(f.seconds, 3),
                }
                for f in self.files
            ],
        }


def expand_paths(paths: Iterable[str | os.PathLike[str]]) -> list[Path]:
    """Files as given, directories as their files (recursive, sorted, hidden entries skipped)."""
    out: list[Path] = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            out.extend(
                sorted(
                    p
                    for p in path.rglob("*")
                    if p.is_file() and not any(part.startswith(".") for part in p.relative_to(path).parts)
                )
            )
        else:
            out.append(path)
    return out


def default_run_label(paths: Sequence[str | os.PathLike[str]]) -> str:
    """The first path's name without compression and format suffixes (traces.jsonl.gz → traces);
    a folder gives its own name."""
    name = Path(paths[0]).resolve().name if paths else "run"
    if paths and Path(paths[0]).is_dir():
        return name or "run"
    for suffix in _COMPRESSED_SUFFIXES:
        if name.lower().endswith(suffix):
            name = name[: -len(suffix)]
    stem = Path(name).stem or name
    return stem or "run"


def reason_of(error: DecodeError) -> str:
    """A rejection's reason with the specifics (paths, ids, numbers) taken out, for grouping."""
    message = re.sub(r"^(resource_?[sS]pans\[\d+\][^:]*: )", "", error.message)
    message = re.sub(r"'[^']*'|\"[^\"]*\"", "…", message)
    return re.sub(r"(?<![A-Za-z])\d+", "N", message)


def store_batches(
    conn: WriterConnection,
    run_label: str,
    batches: Iterable[SpanColumns],
    source_files: list[str],
) -> StoreStats:
    """Append batches to a run inside the caller's open transaction, then dedupe and refresh the run.

    The caller owns BEGIN/COMMIT/ROLLBACK. Within the run, a (TraceId, SpanId) already stored wins
    over a later copy; the runs row (files, counts, setup attributes) and the derived tables are
    brought up to date before returning. Dedupe and refresh look only at the traces the batches
    touched.
    """
    stats = StoreStats()
    before = _query(conn, "ingest_run_span_count", [run_label])[0][0]
    setup: dict[str, set[str]] = {}
    touched = TouchedTraces()
    pending: list[pa.Table] = []  # appended together: DuckDB's per-INSERT cost is not negligible

    def append(whole_groups: bool = False) -> None:
        table = pending[0] if len(pending) == 1 else pa.concat_tables(pending)
        pending.clear()
        if whole_groups:  # the rest waits for the next batches (see INSERT_ROWS)
            rows = table.num_rows - table.num_rows % INSERT_ROWS
            if rows < table.num_rows:
                pending.append(table.slice(rows))
            table = table.slice(0, rows)
        append_batch(conn, run_label, table.combine_chunks())

    for batch in batches:
        if not len(batch):
            continue
        setup_attributes(batch, setup)
        table = batch.to_arrow()
        touched.add(table)
        if pending and not table.schema.equals(pending[0].schema):
            append()
        pending.append(table)
        stats.spans_decoded += len(batch)
        if sum(t.num_rows for t in pending) >= INSERT_ROWS:
            append(whole_groups=True)
    if pending:
        append()
    touched_table = touched.table() if stats.spans_decoded else None
    known = 0
    if touched_table is not None:
        conn.register("ingest_touched", touched_table)
        try:
            scope = [run_label, touched.first_ns, touched.last_ns]
            if _query(conn, "ingest_has_repeats", scope)[0][0]:
                _query(conn, "ingest_dedupe_run", scope)
            if before:
                window = trace_window(conn, run_label, touched.span_range())
                known = _query(conn, "ingest_known_traces", [run_label, *window])[0][0]
        finally:
            conn.unregister("ingest_touched")
    after = _query(conn, "ingest_run_span_count", [run_label])[0][0]
    stats.spans_stored = after - before
    traces = trace_count(conn, run_label, before, after, len(touched_table or []) - known)
    update_run(conn, run_label, source_files, setup, after, traces)
    stats.run_spans, stats.run_traces = _query(conn, "ingest_run_counts", [run_label])[0]
    # (the memory cap set by load_file stays for the derive: it goes part by part, see derive.PART_SPANS)
    refresh_run(conn, run_label, touched_table, stats.spans_stored, touched.span_range())
    return stats


def append_batch(conn: WriterConnection, run_label: str, table: pa.Table) -> None:
    """INSERT one Arrow batch into otel_traces under `run_label` (see ingest_insert_spans.sql for
    why the batch is a relation with the label as a column, not a registered view)."""
    label = pa.DictionaryArray.from_arrays(
        pa.array(np.zeros(table.num_rows, dtype=np.int32)), pa.array([run_label], pa.string())
    )
    batch = conn.from_arrow(table.append_column("RunLabel", label))
    batch.query("ingest_batch", sql.load("ingest_insert_spans"))


def _query(conn: WriterConnection, name: str, params: list[Any]) -> list[tuple[Any, ...]]:
    """Run one statement from tailscope/sql to its end and return its rows."""
    return conn.execute(sql.load(name), params).fetchall()


class _Counting:
    """Bytes read so far from the raw (possibly compressed) file, for the progress bar."""

    def __init__(self, raw: BinaryIO) -> None:
        self.raw = raw

    def position(self) -> int:
        try:
            return self.raw.tell()
        except (OSError, ValueError):
            return 0


def decode_file(
    raw: BinaryIO,
    source: str,
    result: FileResult,
    on_bad: Callable[[DecodeError], None] | None,
    pool: DecodePool | None = None,
) -> Iterator[SpanColumns | ArrowSpans]:
    """Decode one open file: decompress, detect, decode (batches). Sets result.format/compression.

    OTLP JSON lines go to the fast decoder (on `pool`'s workers when given), everything else to
    its format's reference decoder."""
    size = os.fstat(raw.fileno()).st_size
    stream, result.compression = open_decompressed(raw, source, size)
    head = stream.peek(otlp_fast.BLOCK_BYTES)  # type: ignore[attr-defined]
    result.format = detect.detect(head[: detect.HEAD_BYTES], source)
    if result.format is None:
        raise DecodeError(source, "byte 0", "no trace data: the file is empty or blank")
    fast = {"otlp_json": otlp_fast.decode, "otlp_proto": otlp_proto_fast.decode}.get(result.format)
    if fast is not None and (
        otlp_fast.is_json_lines(head) if result.format == "otlp_json" else otlp_proto.is_length_prefixed(head)
    ):
        if pool is not None:
            return pool.decode(result.format, stream, source, on_bad)
        return fast(stream, source, on_bad)
    return detect.decoder_for(result.format, source)(stream, source, on_bad)


def load_file(
    path: Path,
    db_path: str | Path | None,
    run_label: str,
    skip_bad: bool = False,
    progress: Callable[[int, int], None] | None = None,
    pool: DecodePool | None = None,
) -> FileResult:
    """Load one file in one transaction. A DecodeError (strict mode) leaves the store unchanged."""
    started = time.perf_counter()
    source = str(path)
    result = FileResult(path=source)

    def on_bad(error: DecodeError) -> None:
        result.rejected += 1
        result.reasons[reason_of(error)] += 1

    try:
        with open(path, "rb", buffering=1 << 20) as raw, connect_writer(db_path) as conn:
            _query(conn, "ingest_writer_memory", [])
            counting = _Counting(raw)
            batches = decode_file(raw, source, result, on_bad if skip_bad else None, pool)

            def reported(batches: Iterable[SpanColumns]) -> Iterator[SpanColumns]:
                decoded = 0
                for batch in batches:
                    decoded += len(batch)
                    if progress is not None:
                        progress(counting.position(), decoded)
                    yield batch

            conn.begin()
            try:
                stats = store_batches(conn, run_label, reported(batches), [source])
                conn.commit()
            except BaseException:
                conn.rollback()
                raise
        result.spans = stats.spans_stored
        result.duplicates = stats.duplicates
        result.run_traces = stats.run_traces
    except DecodeError as error:
        result.error = str(error)
        result.spans = result.duplicates = 0
    except OSError as error:
        result.error = f"{source}: {error.strerror or error}"
    result.seconds = time.perf_counter() - started
    return result


def load_paths(
    paths: Iterable[str | os.PathLike[str]],
    db_path: str | Path | None,
    run_label: str | None,
    skip_bad: bool = False,
    progress: Progress | None = None,
) -> LoadSummary:
    """Load files and folders into one run, file by file (each its own transaction).

    `run_label` None → `default_run_label(paths)`. `progress(bytes_read, bytes_total, spans)` is
    called after every batch. Files that fail are reported in the summary, the others still load.
    """
    started = time.perf_counter()
    files = expand_paths(paths)
    label = run_label or default_run_label(list(paths))
    summary = LoadSummary(run_label=label)
    sizes = [_size(p) for p in files]
    total = sum(sizes)
    done_bytes = done_spans = 0
    parallel = decode_on_workers(sizes)
    with DecodePool() if parallel else contextlib.nullcontext() as pool:
        for path, size in zip(files, sizes, strict=True):

            def file_progress(
                position: int, spans: int, base: tuple[int, int] = (done_bytes, done_spans)
            ) -> None:
                if progress is not None:
                    progress(base[0] + position, total, base[1] + spans)

            use_pool = pool if size >= PARALLEL_MIN_BYTES else None
            result = load_file(path, db_path, label, skip_bad, file_progress, use_pool)
            summary.files.append(result)
            done_bytes += size
            done_spans += result.spans
            if progress is not None:
                progress(done_bytes, total, done_spans)
    committed = [f.run_traces for f in summary.files if f.run_traces is not None]
    summary.traces = committed[-1] if committed else 0
    summary.seconds = time.perf_counter() - started
    return summary


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0
