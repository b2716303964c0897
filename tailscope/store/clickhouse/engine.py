"""The ClickHouse engine's Store: tailscope.store.interface.Store over a ClickHouseClient (chdb in
process, or a server over HTTP)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager

from tailscope import sql
from tailscope.rules import PhaseRule, StageRule
from tailscope.rules.phases import phase_rule_problems
from tailscope.rules.stages import stage_rule_problems
from tailscope.store.clickhouse import load, requests_weight, span_durations, write
from tailscope.store.clickhouse.collect import ClickHouseSink
from tailscope.store.clickhouse.reader import ClickHouseReader
from tailscope.store.clickhouse.statements import ALL_TIME, RunSelection
from tailscope.store.clickhouse.store import EXPORTER_DDL, TAILSCOPE_DDL, ClickHouseClient
from tailscope.store.errors import UnsupportedError
from tailscope.store.interface import Migration


class ClickHouseStore(ClickHouseClient):
    """A ClickHouse store: the exporter's otel_traces read in place, runs as selections of it."""

    @property
    def name(self) -> str:
        return self.location.url

    file = None  # a folder (chdb) or a server

    def delete(self) -> None:
        raise UnsupportedError(f"{self.name}: a ClickHouse store is not deleted by tailscope")

    def create_tables(self) -> None:
        """The exporter's otel_traces (and its trace-id lookup) when missing, then tailscope's tables."""
        self.prepare(writing=True)

    def prepare(self, writing: bool = False) -> None:
        """Before a command: otel_traces checked (created first when `writing` and missing),
        tailscope's own tables created when missing."""
        if writing:
            for name in EXPORTER_DDL:
                self.query(sql.load(name, dialect="clickhouse"))
        self.check()
        for name in TAILSCOPE_DDL:
            self.query(sql.load(name, dialect="clickhouse"))
        requests_weight.ensure(self)
        span_durations.ensure(self)

    @contextmanager
    def reading(self) -> Iterator[ClickHouseReader]:
        yield ClickHouseReader(self)

    def _replace(
        self, rules: list, problems: Callable, what: str, replace: Callable, progress: write.Progress | None
    ) -> list[str]:
        found = problems(rules, ClickHouseReader(self).regex_error)
        if found:
            raise ValueError(f"invalid {what}: " + "; ".join(found))
        return replace(self, rules, progress)

    def replace_stage_rules(
        self, rules: list[StageRule], progress: write.Progress | None = None
    ) -> list[str]:
        return self._replace(rules, stage_rule_problems, "stage rules", write.replace_stage_rules, progress)

    def replace_phase_rules(
        self, rules: list[PhaseRule], progress: write.Progress | None = None
    ) -> list[str]:
        return self._replace(rules, phase_rule_problems, "phase rules", write.replace_phase_rules, progress)

    def run_writer(self, run: str, files: int = 1) -> AbstractContextManager[load.ClickHouseRunWriter]:
        return load.run_writer(self, run, files)

    def span_sink(self, run: str, source: str) -> ClickHouseSink:
        return ClickHouseSink(self, run, source)

    def select_run(
        self, run: str, start_ns: int | None, end_ns: int | None, filters: dict[str, str]
    ) -> tuple[int, int]:
        start = ALL_TIME[0] if start_ns is None else start_ns
        end = ALL_TIME[1] if end_ns is None else end_ns
        wanted = RunSelection(start, end, filters)
        first, last, spans = self.query(sql.load("selection_bounds", "clickhouse"), wanted.params()).first()
        if not spans:
            raise LookupError(f"no spans match (filters {filters or 'none'})")
        bounds = (first if start_ns is None else start, last if end_ns is None else end)
        write.define_run(self, run, RunSelection(*bounds, filters))
        return int(spans), write.refresh_run(self, run)

    def migrate(self) -> Migration:
        raise UnsupportedError(
            f"{self.name}: a ClickHouse store needs no migration (tailscope's tables are created or "
            "brought up to date when a command opens it)"
        )
