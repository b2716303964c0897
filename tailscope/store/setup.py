"""What both engines' writers do alike with the batches they are given: the spans as Arrow tables of
about the size the engine inserts at once (`arrow_chunks`), and the resource attributes that describe
a run's setup (device, dtype, host, versions), kept with the run (DuckDB: runs.SetupAttributes;
ClickHouse: tailscope_runs) for the run-vs-run comparison."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import pyarrow as pa

from tailscope.store.interface import SpanBatch

# Resource attributes that describe a run's setup and are kept in runs.SetupAttributes.
SETUP_KEYS = frozenset(
    {
        "host.name", "host.arch", "host.type", "os.type", "os.description",
        "service.version", "service.namespace", "deployment.environment", "deployment.environment.name",
        "process.runtime.name", "process.runtime.version", "telemetry.sdk.language", "telemetry.sdk.version",
        "cloud.provider", "cloud.region", "cloud.instance.type", "k8s.node.name",
    }
)  # fmt: skip
SETUP_PREFIXES = ("tailscope.",)
SETUP_WORDS = ("device", "gpu", "dtype", "batch")


def setup_attributes(batch: SpanBatch, into: dict[str, set[str]]) -> None:
    """Collect the setup-describing resource attributes of a batch (each resource looked at once)."""
    for attrs in batch.unique_resources():
        for key, value in attrs.items():
            if (
                key in SETUP_KEYS
                or key.startswith(SETUP_PREFIXES)
                or any(word in key for word in SETUP_WORDS)
            ):
                into.setdefault(key, set()).add(value)


def arrow_chunks(
    batches: Iterable[SpanBatch], setup: dict[str, set[str]], rows: int, whole: bool = False
) -> Iterator[pa.Table]:
    """The batches' spans as Arrow tables of at least `rows` rows but the last (batches of one
    schema concatenated; `whole`: each but the last exactly a multiple of `rows` rows, the rest
    carried into the next), the batches' setup attributes collected into `setup` on the way."""
    pending: list[pa.Table] = []
    for batch in batches:
        if not len(batch):
            continue
        setup_attributes(batch, setup)
        table = batch.to_arrow()
        if pending and not table.schema.equals(pending[0].schema):
            yield _concat(pending)
        pending.append(table)
        size = sum(t.num_rows for t in pending)
        if size >= rows:
            chunk = _concat(pending)
            if whole and size % rows:
                pending.append(chunk.slice(size - size % rows))
                chunk = chunk.slice(0, size - size % rows)
            yield chunk
    if pending:
        yield _concat(pending)


def _concat(tables: list[pa.Table]) -> pa.Table:
    """The tables as one, `tables` emptied."""
    table = tables[0] if len(tables) == 1 else pa.concat_tables(tables)
    tables.clear()
    return table
