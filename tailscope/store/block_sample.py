"""Which blocks of consecutive requests a block sample draws (tail vs body's attribute sample of a large
selection): the rule both engines follow, so that they sample the same requests. DuckDB calls
`drawn_blocks` (tailscope.store.duckdb.tail_sample); ClickHouse computes the same seeded splitmix64
order in SQL (sql/clickhouse/tail_sample_cte.sql), tests/parity/test_tail_block_parity.py checks that
they agree."""

from __future__ import annotations

import numpy as np

BLOCKS = 8  # blocks drawn per side
SEED = 0x5EED_7A11


def _mix(values: np.ndarray) -> np.ndarray:
    """splitmix64 of each value (uint64): a platform-independent order of the blocks."""
    with np.errstate(over="ignore"):
        z = values.astype(np.uint64) + np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


def drawn_blocks(total: int, sample: int, side: bool, blocks: int = BLOCKS) -> list[tuple[int, int]]:
    """The [first, end) request numbers of the blocks drawn from a side of `total` requests for a
    sample of `sample`: blocks of ceil(sample / blocks) consecutive requests, `blocks` of them drawn
    by a seeded hash of (their number, the side, its size), in order; every block when they are no
    more (the whole side)."""
    if total <= 0 or sample <= 0:
        return []
    size = -(-sample // blocks)
    count = -(-total // size)
    numbers = np.arange(count, dtype=np.uint64)
    key = _mix(numbers ^ _mix(np.array([SEED ^ (int(side) << 62) ^ total], dtype=np.uint64)))
    chosen = np.sort(numbers[np.argsort(key, kind="stable")[:blocks]])
    return [(int(b) * size, min((int(b) + 1) * size, total)) for b in chosen]
