"""Security: loopback by default, bounded requests, bound parameters only, nothing evaluated.

Hostile strings (quotes, semicolons, SQL fragments, format and template syntax, Python code) go in
as run labels, service names, span names, attribute keys and values, through `ingest` and through
`collect`, then through the CLI reports. They must come back out verbatim, the tables must be
intact, and nothing may run. A static scan keeps SQL text from being glued together with values.
"""

from __future__ import annotations

import ast
import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from receiver_support import REPO_ROOT, STOPPED, Collector

from tailscope.store.duckdb.connection import connect_reader

DROP = "'; DROP TABLE otel_traces; --"
OR_TRUE = '" OR 1=1 --'


def hostile_values(canary: Path) -> list[str]:
    return [
        DROP,
        OR_TRUE,
        "x'); DELETE FROM runs; --",
        "%s %d {0} {run} $1 ? :name",
        f"__import__('os').system('touch {canary}')",
        "{{7*7}} ${jndi:ldap://127.0.0.1/x} `touch " + str(canary) + "`",
        "ünïcødé \\' \\\" ; -- /* */",
    ]


def cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-c", "from tailscope.cli.main import entrypoint; entrypoint()", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout, cwd=REPO_ROOT)


def hostile_export(values: list[str], traces: int = 40) -> dict:
    """An OTLP/JSON request/file: server roots with children, every string a hostile value."""
    spans = []
    for t in range(traces):
        value = values[t % len(values)]
        trace_id, root = f"{t + 1:032x}", f"{t + 1:08x}{1:08x}"
        start = 1_700_000_000_000_000_000 + t * 10_000_000
        attributes = [
            {"key": "http.route", "value": {"stringValue": value}},
            {"key": value, "value": {"stringValue": value}},
        ]
        spans.append(
            {
                "traceId": trace_id,
                "spanId": root,
                "name": value,
                "kind": 2,
                "startTimeUnixNano": str(start),
                "endTimeUnixNano": str(start + 5_000_000 + t * 10_000),
                "attributes": attributes,
            }
        )
        for s in range(2):
            spans.append(
                {
                    "traceId": trace_id,
                    "spanId": f"{t + 1:08x}{s + 2:08x}",
                    "parentSpanId": root,
                    "name": ["model.forward", "feature.lookup"][s],
                    "kind": 1,
                    "startTimeUnixNano": str(start + 100_000),
                    "endTimeUnixNano": str(start + 2_000_000),
                    "attributes": attributes,
                }
            )
    resource = [
        {"key": "service.name", "value": {"stringValue": OR_TRUE}},
        {"key": "host.name", "value": {"stringValue": DROP}},
    ]
    return {"resourceSpans": [{"resource": {"attributes": resource}, "scopeSpans": [{"spans": spans}]}]}


def assert_intact(db_path: Path, runs: dict[str, int]) -> None:
    with connect_reader(db_path) as conn:
        tables = {
            row[0] for row in conn.execute("SELECT table_name FROM information_schema.tables").fetchall()
        }
        assert {"otel_traces", "runs", "requests", "schema_version"} <= tables
        counts = dict(conn.execute("SELECT RunLabel, count(*) FROM otel_traces GROUP BY 1").fetchall())
        labels = {row[0] for row in conn.execute("SELECT RunLabel FROM runs").fetchall()}
    assert counts == runs
    assert labels == set(runs)


@pytest.fixture(scope="module")
def hostile_store(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str], Path]:
    """One run through `ingest` (label DROP) and one through `collect` (label OR_TRUE)."""
    tmp = tmp_path_factory.mktemp("hostile")
    canary = tmp / "evaluated"
    values = hostile_values(canary)
    db_path = tmp / "store.duckdb"
    export = tmp / "hostile.json"
    export.write_text(json.dumps(hostile_export(values)))
    result = cli("ingest", str(export), "--db", str(db_path), "--run", DROP, "--json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["run"] == DROP

    collector = Collector(db_path, OR_TRUE, "--flush-interval-ms", "20")
    try:
        body = json.dumps(hostile_export(values)).encode()
        assert collector.post(body, "application/json").status_code == 200
    finally:
        assert collector.stop() == STOPPED, collector.output()
    return db_path, values, canary


def test_hostile_values_are_stored_verbatim_and_tables_intact(hostile_store) -> None:
    db_path, values, canary = hostile_store
    assert_intact(db_path, {DROP: 120, OR_TRUE: 120})
    with connect_reader(db_path) as conn:
        names = {row[0] for row in conn.execute("SELECT DISTINCT SpanName FROM otel_traces").fetchall()}
        services = {row[0] for row in conn.execute("SELECT DISTINCT ServiceName FROM otel_traces").fetchall()}
        keys = {
            key
            for (attributes,) in conn.execute("SELECT SpanAttributes FROM otel_traces").fetchall()
            for key in json.loads(attributes)
        }
        hosts = conn.execute("SELECT DISTINCT ResourceAttributes->>'host.name' FROM otel_traces").fetchall()
    assert set(values) <= names
    assert services == {OR_TRUE}
    assert set(values) <= keys
    assert hosts == [(DROP,)]
    assert not canary.exists()


@pytest.mark.parametrize(
    "command",
    [
        ("waterfall", "--run", DROP, "--json"),
        ("waterfall", "--run", OR_TRUE, "--json"),
        ("diagnose", "--run", DROP, "--json"),
        ("compare", DROP, OR_TRUE, "--json", "--resamples", "200"),
    ],
    ids=["waterfall-ingested", "waterfall-collected", "diagnose", "compare"],
)
def test_reports_take_hostile_labels_as_plain_values(hostile_store, command: tuple[str, ...]) -> None:
    from tailscope.cli import main

    module = dict((name, module) for name, module, _ in main.COMMANDS)[command[0]]
    if not (REPO_ROOT / "tailscope" / "cli" / f"{module}.py").exists():
        pytest.skip(f"`tailscope {command[0]}` is not in this build yet")
    db_path, _, canary = hostile_store
    result = cli(*command, "--db", str(db_path))
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    # The hostile label matched its run exactly (40 requests each), as a plain value.
    if command[0] == "waterfall":
        assert report["requests_total"] == 40
    elif command[0] == "diagnose":
        assert (report["run"], report["requests"]) == (DROP, 40)
    else:
        assert (report["run_a"], report["run_b"]) == (DROP, OR_TRUE)
    assert {DROP, OR_TRUE} & _strings(report) or command[0] == "waterfall"
    assert_intact(db_path, {DROP: 120, OR_TRUE: 120})
    assert not canary.exists()


def _strings(value: object) -> set[str]:
    if isinstance(value, str):
        return {value}
    if isinstance(value, dict):
        return {s for k, v in value.items() for s in _strings(k) | _strings(v)}
    if isinstance(value, list):
        return {s for v in value for s in _strings(v)}
    return set()


# -- the receiver's exposure ---------------------------------------------------------------------------


def _listeners(port: int) -> set[str]:
    """Local addresses (hex, as /proc/net/tcp* has them) listening on `port`."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        path = Path(table)
        if not path.exists():
            continue
        for line in path.read_text().splitlines()[1:]:
            fields = line.split()
            address, state = fields[1], fields[3]
            if state == "0A" and int(address.rsplit(":", 1)[1], 16) == port:
                found.add(address.rsplit(":", 1)[0])
    return found


def test_collect_and_serve_bind_loopback_by_default(tmp_path: Path) -> None:
    import argparse

    from tailscope.cli import collect_cmd

    parser = argparse.ArgumentParser()
    collect_cmd.add_arguments(parser)
    assert parser.parse_args([]).host == "127.0.0.1"
    serve_cmd = REPO_ROOT / "tailscope" / "cli" / "serve_cmd.py"
    if serve_cmd.exists():
        from tailscope.cli import serve_cmd as serve

        parser = argparse.ArgumentParser()
        serve.add_arguments(parser)
        assert parser.parse_args([]).host == "127.0.0.1"
    config = REPO_ROOT / ".streamlit" / "config.toml"
    if config.exists():
        assert 'address = "127.0.0.1"' in config.read_text()

    collector = Collector(tmp_path / "store.duckdb", "r")  # no --host
    try:
        assert collector.url.startswith("http://127.0.0.1:")
        port = int(collector.url.split(":")[2].split("/")[0])
        if Path("/proc/net/tcp").exists():
            assert _listeners(port) == {"0100007F"}  # 127.0.0.1 only: not 0.0.0.0, not ::
    finally:
        assert collector.stop() == STOPPED


def test_oversized_request_is_refused_before_it_is_read(tmp_path: Path) -> None:
    collector = Collector(tmp_path / "store.duckdb", "r", "--max-request-bytes", "1000000")
    try:
        port = int(collector.url.split(":")[2].split("/")[0])
        started = time.monotonic()
        with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
            conn.sendall(
                b"POST /v1/traces HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-protobuf\r\n"
                b"Content-Length: 10737418240\r\n\r\n" + b"\0" * 1000
            )
            answer = conn.recv(4096)
        assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
        assert time.monotonic() - started < 5
    finally:
        assert collector.stop() == STOPPED


# -- static checks ---------------------------------------------------------------------------------------

SCANNED = ("tailscope", "app", "ingest")
EXECUTORS = {"execute", "executemany", "sql", "query", "run_query"}


class _SqlScan(ast.NodeVisitor):
    """Finds SQL passed to execute()-like calls that is built with f-strings, .format or %/+.

    An interpolation is allowed only when it cannot carry a value: a constant, quote_identifier(...),
    a loop variable over a literal tuple of constants, or SQL text from a builder / sql.load (a name
    bound by `text, params = builder(...)` or `text = sql.load(...)`). Values go as parameters.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.problems: list[str] = []
        self.safe_names: set[str] = set()
        self.assigned: dict[str, list[ast.expr]] = {}

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        outer = self.safe_names, self.assigned
        self.safe_names, self.assigned = set(), {}
        for child in ast.walk(node):
            if isinstance(child, ast.For) and _literal_constants(child.iter):
                self.safe_names |= _names(child.target)
            elif isinstance(child, ast.Assign) and isinstance(child.value, ast.Call):
                target = child.targets[0]
                if isinstance(target, ast.Tuple) or _is_sql_load(child.value):
                    self.safe_names |= _names(target.elts[0] if isinstance(target, ast.Tuple) else target)
            if isinstance(child, ast.Assign):
                for target in child.targets:
                    if isinstance(target, ast.Name):
                        self.assigned.setdefault(target.id, []).append(child.value)
        self.generic_visit(node)
        self.safe_names, self.assigned = outer

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_Call(self, node: ast.Call) -> None:
        if isinstance(node.func, ast.Attribute) and node.func.attr in EXECUTORS and node.args:
            statement = node.args[0]
            candidates = [statement]
            if isinstance(statement, ast.Name):
                candidates += self.assigned.get(statement.id, [])
            for candidate in candidates:
                if not self._safe(candidate):
                    self.problems.append(f"{self.path}:{node.lineno}: {ast.unparse(node)[:120]}")
                    break
        self.generic_visit(node)

    def _safe(self, node: ast.expr) -> bool:
        if isinstance(node, ast.JoinedStr):
            return all(self._safe_part(v.value) for v in node.values if isinstance(v, ast.FormattedValue))
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Mod, ast.Add)):
            return self._safe_part(node.left) and self._safe_part(node.right)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "format":
            return all(self._safe_part(a) for a in [*node.args, *(k.value for k in node.keywords)])
        return True

    def _safe_part(self, node: ast.expr) -> bool:
        if isinstance(node, ast.Constant):
            return True
        if isinstance(node, ast.Name):
            return node.id in self.safe_names or node.id.isupper()  # module constants
        if isinstance(node, ast.Call):
            name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            return name == "quote_identifier" or _is_sql_load(node)
        if isinstance(node, (ast.JoinedStr, ast.BinOp)):
            return self._safe(node)
        return False


def _names(target: ast.expr) -> set[str]:
    return {n.id for n in ast.walk(target) if isinstance(n, ast.Name)}


def _literal_constants(node: ast.expr) -> bool:
    return isinstance(node, (ast.Tuple, ast.List)) and all(
        isinstance(n, ast.Constant) or (isinstance(n, (ast.Tuple, ast.List)) and _literal_constants(n))
        for n in node.elts
    )


def _is_sql_load(node: ast.expr) -> bool:
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "load"


def test_no_sql_is_built_from_values_in_python_sources() -> None:
    problems = []
    for folder in SCANNED:
        for path in sorted((REPO_ROOT / folder).rglob("*.py")):
            scan = _SqlScan(path.relative_to(REPO_ROOT))
            scan.visit(ast.parse(path.read_text(encoding="utf-8")))
            problems += scan.problems
    assert problems == []


def test_the_scan_catches_glued_sql() -> None:
    source = """
def f(conn, run):
    conn.execute(f"SELECT * FROM otel_traces WHERE RunLabel = '{run}'")
    conn.execute("SELECT * FROM runs WHERE RunLabel = '%s'" % run)
    conn.execute("SELECT * FROM runs WHERE RunLabel = '{}'".format(run))
    text = "SELECT 1 WHERE x = " + run
    conn.execute(text)
    for column in ("a", "b"):
        conn.execute(f"SELECT {column} FROM t WHERE RunLabel = ?", [run])
    statement, params = builder(run)
    conn.execute(f"CREATE TEMP TABLE x AS {statement}", params)
"""
    scan = _SqlScan(Path("example.py"))
    scan.visit(ast.parse(source))
    assert [p.split(":")[1] for p in scan.problems] == ["3", "4", "5", "7"]


def test_nothing_evaluates_input() -> None:
    """No eval/exec/compile, pickle/marshal or unsafe YAML anywhere data flows."""
    banned_calls = {"eval", "exec", "compile", "__import__"}
    banned_modules = {"pickle", "marshal", "shelve", "dill", "yaml"}
    problems = []
    for folder in SCANNED:
        for path in sorted((REPO_ROOT / folder).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Call) and getattr(node.func, "id", None) in banned_calls:
                    problems.append(f"{path}:{node.lineno}: {getattr(node.func, 'id', '')}()")
                if isinstance(node, ast.Import | ast.ImportFrom):
                    modules = (
                        [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
                    )
                    for module in modules:
                        if module.split(".")[0] in banned_modules:
                            problems.append(f"{path}:{node.lineno}: import {module}")
                if isinstance(node, ast.keyword) and node.arg == "shell" and getattr(node.value, "value", 0):
                    problems.append(f"{path}:{node.lineno}: shell=True")
    assert problems == []
