"""Load trace files into a store: one file = one all-or-nothing write, streamed in batches.

For each file: open → undo whole-file compression → detect the format → decode batches of spans →
hand them to the store's RunWriter (tailscope.store.interface), which writes them (the spans the run
already has left out) and brings the run's derived rows up to date, on DuckDB in one transaction per
file, on ClickHouse after the last file. A decode error in strict mode (or a crash, kill -9) leaves
the store as it was before that file.
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

from ingest import detect, otlp_fast, otlp_proto, otlp_proto_fast
from ingest.arrow_batch import ArrowSpans
from ingest.columns import SpanColumns
from ingest.compression import open_decompressed
from ingest.errors import DecodeError
from ingest.parallel import PARALLEL_MIN_BYTES, DecodePool, decode_on_workers
from tailscope.store.engine import open_store
from tailscope.store.errors import StoreFullError, store_full
from tailscope.store.interface import FileWrite, RunWriter, Store
from tailscope.store.url import default_db_path

_COMPRESSED_SUFFIXES = (".gz", ".gzip", ".zst", ".zstd")

Progress = Callable[[int, int, int], None]  # (bytes read, bytes total, spans decoded so far)


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
    written: FileWrite | None = field(default=None, repr=False)  # what the store's writer did


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


def _write_file(
    writer: RunWriter,
    path: Path,
    skip_bad: bool = False,
    progress: Callable[[int, int], None] | None = None,
    pool: DecodePool | None = None,
) -> FileResult:
    """Decode one file into the writer: all of it, or (a DecodeError in strict mode) none of it."""
    started = time.perf_counter()
    source = str(path)
    result = FileResult(path=source)

    def on_bad(error: DecodeError) -> None:
        result.rejected += 1
        result.reasons[reason_of(error)] += 1

    try:
        with open(path, "rb", buffering=1 << 20) as raw:
            counting = _Counting(raw)

            def decoded() -> Iterator[SpanColumns | ArrowSpans]:
                """The file decoded as the writer asks for it (a DuckDB writer's transaction is open
                by then, so even a file rejected at its first byte leaves a store behind)."""
                spans = 0
                for batch in decode_file(raw, source, result, on_bad if skip_bad else None, pool):
                    spans += len(batch)
                    if progress is not None:
                        progress(counting.position(), spans)
                    yield batch

            write = writer.write_file(source, decoded())
        result.spans = write.stored
        result.duplicates = write.duplicates
        result.run_traces = write.run_traces
        result.written = write
    except DecodeError as error:
        result.error = str(error)
        result.spans = result.duplicates = 0
    except StoreFullError as error:  # (the store's disk, not the file: the whole command stops)
        if error.store is None:
            raise
        raise store_full(error.store, error.cause, f"loading {source}") from error
    except OSError as error:
        result.error = f"{source}: {error.strerror or error}"
    result.seconds = time.perf_counter() - started
    return result


def _store(where: Store | str | os.PathLike[str] | None) -> Store:
    """The store given, or the one a path or URL names (None: the default DuckDB file)."""
    if where is None:
        return open_store(default_db_path())
    if isinstance(where, str | os.PathLike):
        return open_store(os.fspath(where))
    return where


def load_file(
    path: Path,
    store: Store | str | os.PathLike[str] | None,
    run_label: str,
    skip_bad: bool = False,
    progress: Callable[[int, int], None] | None = None,
    pool: DecodePool | None = None,
) -> FileResult:
    """Load one file into a run on its own (the run derived after it). A DecodeError (strict mode)
    leaves the store unchanged."""
    with _store(store).run_writer(run_label, 1) as writer:
        result = _write_file(writer, path, skip_bad, progress, pool)
        traces = writer.finish()
    result.run_traces = traces if result.error is None else result.run_traces
    return result


def load_paths(
    paths: Iterable[str | os.PathLike[str]],
    store: Store | str | os.PathLike[str] | None,
    run_label: str | None,
    skip_bad: bool = False,
    progress: Progress | None = None,
) -> LoadSummary:
    """Load files and folders into one run of a store (a Store, or a DuckDB path / store URL), file
    by file (each all or nothing), then the run's derived rows where the store waits for the last.

    `run_label` None → `default_run_label(paths)`. `progress(bytes_read, bytes_total, spans)` is
    called after every batch. Files that fail are reported in the summary, the others still load.
    """
    started = time.perf_counter()
    paths = list(paths)
    files = expand_paths(paths)
    label = run_label or default_run_label(paths)
    summary = LoadSummary(run_label=label)
    sizes = [_size(p) for p in files]
    total = sum(sizes)
    done_bytes = done_spans = 0
    # big OTLP files decode on worker processes (forked before the store's writer starts a thread;
    # the workers only decode)
    parallel = decode_on_workers(sizes)
    pool_context = DecodePool() if parallel else contextlib.nullcontext()
    with pool_context as pool, _store(store).run_writer(label, len(files)) as writer:
        for path, size in zip(files, sizes, strict=True):

            def file_progress(
                position: int, spans: int, base: tuple[int, int] = (done_bytes, done_spans)
            ) -> None:
                if progress is not None:
                    progress(base[0] + position, total, base[1] + spans)

            use_pool = pool if size >= PARALLEL_MIN_BYTES else None
            result = _write_file(writer, path, skip_bad, file_progress, use_pool)
            summary.files.append(result)
            done_bytes += size
            done_spans += result.spans
            if progress is not None:
                progress(done_bytes, total, done_spans)
        summary.traces = writer.finish()
    for result in summary.files:  # a writer may count a file's spans again once the run is derived
        if result.written is not None:
            result.spans, result.duplicates = result.written.stored, result.written.duplicates
    summary.seconds = time.perf_counter() - started
    return summary


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0
