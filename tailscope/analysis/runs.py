"""Which runs the store holds: with spans, and with derived requests."""

from __future__ import annotations

from tailscope.store.interface import Reader


def runs_with_requests(reader: Reader) -> list[str]:
    return [row[0] for row in reader.run("request_runs").fetchall()]


def runs_with_spans(reader: Reader) -> list[str]:
    return [row[0] for row in reader.run("span_runs").fetchall()]
