"""A stage-rule edit re-maps the kept span paths instead of walking every trace again (issue 29: a
rule edit of a 100 M-span store took ~6 minutes of CPU, nearly all in span_tree.sql). What it writes
must be what a derive from the spans writes: every `requests` column, the per-run histograms, the
kept rows. Edits the kept rows cannot answer (a new attribute regex, a run derived before the rows
existed or written since its derive) take the derive from the spans. The rows are written lazily:
not at ingest (the common derive costs what it cost before), but by the first stage-rule edit, and
kept current afterwards only in the runs that have them."""

from __future__ import annotations

import shutil
from pathlib import Path

import duckdb
import pytest
from analysis_spans import S, SpanColumns, add_trace, insert, load
from test_span_times import parallel_store

from reference_pipeline.simulate.llm_server import LlmServerConfig, simulate_llm_server
from tailscope.rules import StageRule
from tailscope.rules.phases import default_phase_rules
from tailscope.rules.stages import default_rules
from tailscope.store.duckdb import derive, rule_remap, statements
from tailscope.store.duckdb.connection import connect_writer
from tailscope.store.duckdb.rules import store_rules


@pytest.fixture(autouse=True)
def every_request_keeps_span_times(monkeypatch: pytest.MonkeyPatch) -> None:
    """SpanTimes for every request (the derive keeps them for 1/16), so that they are compared too."""
    monkeypatch.setattr(statements, "SPAN_TIMES_MAX_HASH", 2**64 - 1)


def nested_servers(cols: SpanColumns, n: int) -> None:
    """A gateway SERVER root over a model server's SERVER span (a tier root under the defaults) over
    a batch wait and a forward pass that overlap, and a leaf SERVER span (an untraced dependency)."""
    model = S("Infer", 5, 60, kind="Server", children=[S("wait", 6, 30), S("torch.run", 20, 58)])
    root = S("POST /rank", 0, 70, kind="Server", children=[model, S("scorer", 61, 69, kind="Server")])
    add_trace(cols, root, 5000 + n, offset_ms=n * 100.0)


def loaded(db_path: Path) -> Path:
    """Runs: parallel children and nested servers ('par', 'weighted': root weights 4), phase spans
    ('llm'), nested SERVER tiers ('tiers'), each loaded as ingest loads it."""
    parallel_store(db_path)
    load(db_path, "llm", simulate_llm_server(LlmServerConfig(requests=80, seed=5, scenario="long-prompt")))
    tiers = SpanColumns()
    for n in range(40):
        nested_servers(tiers, n)
    load(db_path, "tiers", tiers)
    return db_path


def kept_rows(path: Path) -> dict[str, tuple]:
    """Per run: (PathsKept, its kept rows), and the path nodes under ''."""
    with connect_writer(path) as conn:
        kept = dict(conn.execute("SELECT RunLabel, PathsKept FROM derive_state").fetchall())
        rows = dict(conn.execute("SELECT RunLabel, count(*) FROM request_paths GROUP BY ALL").fetchall())
        nodes = conn.execute("SELECT count(*) FROM span_paths").fetchone()[0]
    return {"": (None, nodes)} | {run: (kept[run], rows.get(run, 0)) for run in kept}


def flush_into_par(db_path: Path) -> None:
    """A flush into 'par' naming the traces it touched (a new trace and a late child of an old one):
    derived incrementally, not whole."""
    with connect_writer(db_path) as conn:
        root_of_7 = conn.execute(
            "SELECT SpanId FROM otel_traces WHERE RunLabel = 'par' AND TraceId = ? AND ParentSpanId = ''",
            [f"{7:032x}"],
        ).fetchone()[0]
        later = SpanColumns()
        new_trace = S("POST /predict", 0, 90, kind="Server", children=[S("model.forward", 5, 80)])
        add_trace(later, new_trace, 900, offset_ms=121 * 200.0)
        add_trace(later, S("late tokenize", 1, 3), 7, offset_ms=7 * 200.0, parent=root_of_7)
        insert(conn, "par", later)
        batch = later.to_arrow()
        starts = [int(t.value) for t in batch.column("Timestamp")]
        window = (min(starts), max(starts), 90_000_000)
        derive.refresh_run(conn, "par", batch.select(["TraceId"]), len(starts), window)


@pytest.fixture(scope="module")
def built_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The loaded runs after a first stage-rule edit (no change of rules: it keeps every run's path
    rows), then the flush into 'par' (its touched traces' kept rows replaced). Built once for the
    module (with every request's SpanTimes, as the autouse fixture gives each test): ~2 s of CPU."""
    path = tmp_path_factory.mktemp("remap") / "store.duckdb"
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(statements, "SPAN_TIMES_MAX_HASH", 2**64 - 1)
        loaded(path)
        with connect_writer(path) as conn:
            rule_remap.replace_rules(conn, default_rules())
        flush_into_par(path)
    return path


@pytest.fixture
def store(built_store: Path, db_path: Path) -> Path:
    """A copy of the built store, the test's own to edit."""
    for part in built_store.parent.glob(built_store.name + "*"):  # the file, and a WAL if one is left
        shutil.copyfile(part, db_path.parent / part.name.replace(built_store.name, db_path.name, 1))
    return db_path


def snapshot(path: Path) -> dict[str, list[tuple]]:
    """What the derive writes, in a fixed order (request_paths by span name, not PathId: a derive
    under other attribute regexes keeps other signatures)."""
    with connect_writer(path) as conn:
        tables = {
            "requests": "SELECT * FROM requests ORDER BY RunLabel, TraceId",
            "request_histogram": "SELECT * FROM request_histogram ORDER BY ALL",
            "stage_histogram": "SELECT * FROM stage_histogram ORDER BY ALL",
            "derive_state": "SELECT RunLabel, SpanRows, PathsKept FROM derive_state ORDER BY RunLabel",
            "request_paths": "SELECT k.RunLabel, k.StartNs, k.TK, n.SpanName, k.Ns FROM request_paths AS k "
            "JOIN span_paths AS n USING (PathId) ORDER BY ALL",
        }
        return {name: conn.execute(text).fetchall() for name, text in tables.items()}


def edit(path: Path, rules: list[StageRule], from_spans: bool, keep_paths: bool = True) -> None:
    """The store's rule edit (rule_remap.replace_rules), or a derive of every run from its spans
    keeping every run's path rows (as an edit the kept rows cannot answer does), or without
    `keep_paths` only those of the runs that had them (as a phase-rule edit does)."""
    with connect_writer(path) as conn:
        if from_spans:

            def refresh(conn: duckdb.DuckDBPyConnection, progress: derive.Progress | None) -> None:
                derive.refresh_all(conn, progress, keep_paths=keep_paths)

            derive.rederive_after(conn, lambda: store_rules(conn, rules), refresh=refresh)
        else:
            rule_remap.replace_rules(conn, rules)


def counting(monkeypatch: pytest.MonkeyPatch, derived_runs: list[str]) -> None:
    """derive.refresh_run noting each run it derives from its spans."""
    original = derive.refresh_run

    def refresh_run(conn: duckdb.DuckDBPyConnection, run: str, **kwargs: object) -> None:
        derived_runs.append(run)
        original(conn, run, **kwargs)

    monkeypatch.setattr(derive, "refresh_run", refresh_run)


def no_derive(*args: object, **kwargs: object) -> None:
    raise AssertionError("a run was derived from its spans")


def reordered() -> list[StageRule]:
    """The catch-all CLIENT rule first: redis.get (CLIENT, db.system) becomes downstream."""
    rules = default_rules()
    return [rules[-1], *rules[:-1]]


def server_rule() -> list[StageRule]:
    """A rule naming kind Server for the model server's span: no longer a tier root."""
    return [StageRule(1, "queue", span_kind="Server", name_regex="^Infer$"), *default_rules()]


def restaged() -> list[StageRule]:
    """Every rule's stage moved on by one, the messaging attribute rule dropped (fewer attribute
    regexes than were derived: still answerable)."""
    rules = [r for r in default_rules() if r.attribute_regex != r"^messaging\."]
    stages = [r.stage for r in rules]
    return [
        StageRule(r.position, stages[i - 1], r.span_kind, r.name_regex, r.attribute_regex)
        for i, r in enumerate(rules)
    ]


@pytest.mark.parametrize("rules", [reordered, server_rule, restaged])
def test_an_edit_from_kept_paths_writes_what_a_derive_from_the_spans_writes(
    store: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, rules
) -> None:
    before = snapshot(store)
    copy = tmp_path / "copy.duckdb"
    shutil.copy(store, copy)
    with monkeypatch.context() as patch:
        patch.setattr(derive, "refresh_run", no_derive)
        edit(store, rules(), from_spans=False)
    edit(copy, rules(), from_spans=True)
    remapped, derived = snapshot(store), snapshot(copy)
    assert remapped["requests"] != before["requests"]  # the edit moved time between stages
    assert len(remapped["requests"]) == 2 * 120 + 1 + 80 + 40
    assert all(row[-1] for row in remapped["requests"])  # SpanTimes kept and compared
    for table in derived:
        assert remapped[table] == derived[table], table


def test_an_edit_with_a_new_attribute_regex_is_derived_from_the_spans(
    store: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rules = [StageRule(1, "queue", attribute_regex="^db\\.system=redis$"), *default_rules()]
    copy = tmp_path / "copy.duckdb"
    shutil.copy(store, copy)
    derived_runs: list[str] = []
    with monkeypatch.context() as patch:
        counting(patch, derived_runs)
        edit(store, rules, from_spans=False)
    assert derived_runs == ["llm", "par", "tiers", "weighted"]
    edit(copy, rules, from_spans=True)
    assert snapshot(store) == snapshot(copy)
    with monkeypatch.context() as patch:  # the nodes now hold the new regex's hits: answerable again
        patch.setattr(derive, "refresh_run", no_derive)
        edit(store, reordered(), from_spans=False)


def test_a_run_written_since_its_derive_is_derived_from_its_spans_the_others_re_mapped(
    store: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with connect_writer(store) as conn:
        late = SpanColumns()
        add_trace(late, S("POST /rank", 0, 9, kind="Server"), 9999, offset_ms=10.0)
        insert(conn, "tiers", late)  # no refresh: derive_state.SpanRows behind
    derived_runs: list[str] = []
    counting(monkeypatch, derived_runs)
    edit(store, server_rule(), from_spans=False)
    assert derived_runs == ["tiers"]
    with connect_writer(store) as conn:
        assert conn.execute("SELECT count(*) FROM requests WHERE RunLabel = 'tiers'").fetchone()[0] == 41


def test_a_version_4_store_migrates_and_its_first_edit_derives_from_the_spans(
    store: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    copy = tmp_path / "copy.duckdb"
    shutil.copy(store, copy)
    con = duckdb.connect(str(store))  # as version 4 wrote it
    con.execute("DROP TABLE request_paths")
    con.execute("DROP TABLE span_paths")
    con.execute("ALTER TABLE derive_state DROP COLUMN PathsKept")
    con.execute("UPDATE schema_version SET version = 4")
    requests = con.execute("SELECT * FROM requests ORDER BY RunLabel, TraceId").fetchall()
    con.close()
    with connect_writer(store) as conn:  # a writer's open migrates
        assert conn.execute("SELECT max(version) FROM schema_version").fetchone()[0] == 5
        assert conn.execute("SELECT count(*) FROM request_paths").fetchone()[0] == 0
        assert conn.execute("SELECT * FROM requests ORDER BY RunLabel, TraceId").fetchall() == requests
    derived_runs: list[str] = []
    counting(monkeypatch, derived_runs)
    edit(store, reordered(), from_spans=False)
    assert derived_runs == ["llm", "par", "tiers", "weighted"]
    edit(copy, reordered(), from_spans=True)
    assert snapshot(store) == snapshot(copy)
    monkeypatch.setattr(derive, "refresh_run", no_derive)
    edit(store, server_rule(), from_spans=False)  # the rows are filled now


def test_ingest_and_its_refreshes_keep_no_path_rows_until_a_stage_rule_edit(
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    loaded(db_path)
    flush_into_par(db_path)
    runs = ["llm", "par", "tiers", "weighted"]
    assert kept_rows(db_path) == {"": (None, 0)} | {run: (False, 0) for run in runs}
    derived_runs: list[str] = []
    with monkeypatch.context() as patch:
        counting(patch, derived_runs)
        edit(db_path, reordered(), from_spans=False)  # the first edit: every run from its spans
    assert derived_runs == runs
    after = kept_rows(db_path)
    assert after[""][1] > 0 and all(after[run][0] and after[run][1] >= 80 for run in runs)
    monkeypatch.setattr(derive, "refresh_run", no_derive)
    edit(db_path, server_rule(), from_spans=False)  # the second: re-mapped


def test_a_derive_keeping_paths_writes_what_the_plain_derive_writes(store: Path, tmp_path: Path) -> None:
    plain = tmp_path / "plain.duckdb"
    shutil.copy(store, plain)
    with connect_writer(plain) as conn:  # as if no edit had kept rows: every run derived plainly
        conn.execute("DELETE FROM request_paths")
        conn.execute("DELETE FROM span_paths")
        conn.execute("UPDATE derive_state SET PathsKept = false")
    edit(store, server_rule(), from_spans=True)
    edit(plain, server_rule(), from_spans=True, keep_paths=False)
    with_paths, without = snapshot(store), snapshot(plain)
    assert len(with_paths["request_paths"]) > 0 and without["request_paths"] == []
    for table in ("requests", "request_histogram", "stage_histogram"):
        assert with_paths[table] == without[table], table


def test_a_second_edit_from_kept_paths_writes_what_a_derive_from_the_spans_writes(
    store: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    copy = tmp_path / "copy.duckdb"
    shutil.copy(store, copy)
    with monkeypatch.context() as patch:
        patch.setattr(derive, "refresh_run", no_derive)
        edit(store, reordered(), from_spans=False)
        edit(store, restaged(), from_spans=False)
    edit(copy, reordered(), from_spans=True)
    edit(copy, restaged(), from_spans=True)
    assert snapshot(store) == snapshot(copy)


def test_a_run_loaded_after_the_first_edit_keeps_none_until_the_next_and_a_phase_edit_adds_none(
    store: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    late = SpanColumns()
    for n in range(10):
        nested_servers(late, 100 + n)
    load(store, "late", late)
    with connect_writer(store) as conn:  # a phase-rule edit: every run from its spans
        derive.replace_phase_rules(conn, default_phase_rules())
    rows = kept_rows(store)
    assert rows["late"] == (False, 0) and rows["tiers"][0] and rows["tiers"][1] > 0
    copy = tmp_path / "copy.duckdb"
    shutil.copy(store, copy)
    derived_runs: list[str] = []
    counting(monkeypatch, derived_runs)
    edit(store, server_rule(), from_spans=False)
    assert derived_runs == ["late"]  # the others re-mapped from the rows the phase edit kept current
    assert kept_rows(store)["late"][0]
    edit(copy, server_rule(), from_spans=True)
    assert snapshot(store) == snapshot(copy)
