"""The test suite's tiers: ./test.sh leaves out the `full` tier unless given --full, and every test in that
tier names a default test that checks the same behaviour (tests/conftest.py)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from conftest import REPO_ROOT, full_tier_problems, seed_variants

FILE = "tests/test_x.py"


def full(cover: object = None) -> pytest.Mark:
    return pytest.mark.full(covered_by=cover).mark if cover is not None else pytest.mark.full.mark


def test_a_variant_that_names_a_default_test_passes() -> None:
    marked = [(f"{FILE}::test_a[fp32]", None), (f"{FILE}::test_a[bf16]", full(f"{FILE}::test_a[fp32]"))]
    assert full_tier_problems(marked) == []
    both = (f"{FILE}::test_a[fp32]", f"{FILE}::test_b")
    marked += [(f"{FILE}::test_b", None), (f"{FILE}::test_c", full(both))]
    assert full_tier_problems(marked) == []
    marked[-1] = (f"{FILE}::test_c", full((f"{FILE}::test_a[fp32]", f"{FILE}::test_d")))
    assert ["not a collected test" in p for p in full_tier_problems(marked)] == [True]


@pytest.mark.parametrize(
    "cover,problem",
    [
        (None, "no covered_by"),
        ("test_a[fp32]", "no covered_by"),
        ((), "no covered_by"),
        (f"{FILE}::test_a[fp16]", "not a collected test"),
        (f"{FILE}::test_a[int8]", "in the full tier itself"),
    ],
)
def test_a_variant_without_a_default_test_is_refused(cover: str | None, problem: str) -> None:
    marked = [(f"{FILE}::test_a[fp32]", None), (f"{FILE}::test_a[bf16]", full(cover)),
              (f"{FILE}::test_a[int8]", full(f"{FILE}::test_a[fp32]"))]
    problems = full_tier_problems(marked)
    assert len(problems) == 1 and problem in problems[0], problems


SIM = "tests/test_simulate_blind_x.py"
CONTRACT = f"{SIM}::test_each_format_loads[0]"


def physics(cover: object, reason: str = "simulator physics") -> pytest.Mark:
    return pytest.mark.full(covered_by=cover, reason=reason).mark


def test_a_family_physics_test_covered_by_its_contract_test_passes() -> None:
    marked = [(CONTRACT, None), (f"{SIM}::test_gc_pauses_stretch_the_spans", physics(CONTRACT))]
    assert full_tier_problems(marked) == []


@pytest.mark.parametrize(
    "nodeid,cover,reason,problem",
    [
        (f"{SIM}::test_gc", CONTRACT, "slow", "not a class of the full tier"),
        (f"{FILE}::test_gc", CONTRACT, "simulator physics", "tests/test_simulate*.py only"),
        (f"{SIM}::test_gc", f"{FILE}::test_a[fp32]", "simulator physics", "in its own file"),
        (f"{SIM}::test_gc", None, "simulator physics", "no covered_by"),
        (f"{SIM}::test_gc", f"{SIM}::test_each_format_loads[9]", "simulator physics", "not a collected test"),
        (f"{SIM}::test_gc", f"{SIM}::test_pair", "simulator physics", "in the full tier itself"),
    ],
)
def test_a_physics_mark_outside_its_class_is_refused(nodeid: str, cover: str | None, reason: str,
                                                     problem: str) -> None:
    marked = [(CONTRACT, None), (f"{FILE}::test_a[fp32]", None), (f"{SIM}::test_pair", physics(CONTRACT)),
              (nodeid, physics(cover, reason) if cover else pytest.mark.full(reason=reason).mark)]
    problems = full_tier_problems(marked)
    assert len(problems) == 1 and problem in problems[0], problems


def test_a_cover_in_a_file_not_collected_or_not_collected_whole_is_not_checked() -> None:
    other = [(f"{FILE}::test_a[bf16]", full("tests/test_y.py::test_b"))]
    assert full_tier_problems(other) == []
    one = [(f"{FILE}::test_a[bf16]", full(f"{FILE}::test_a[fp32]"))]  # e.g. `pytest FILE::test_a[bf16]`
    assert full_tier_problems(one, whole_files=False) == []
    assert full_tier_problems(one) != []


def test_seed_variants_keep_one_seed_and_put_the_others_in_the_full_tier_naming_it() -> None:
    @seed_variants(3, 1, 4)
    def test_x(seed: int) -> None: ...

    (mark,) = test_x.pytestmark
    kept, *others = mark.args[1]
    assert (mark.args[0], kept, [p.values for p in others]) == ("seed", 3, [(1,), (4,)])
    cover = "tests/test_suite_tiers.py::test_x[3]"
    assert [p.marks[0].mark.kwargs for p in others] == [{"covered_by": cover}] * 2
    marked = [(cover, None)] + [(f"{cover[:-3]}[{p.values[0]}]", p.marks[0].mark) for p in others]
    assert full_tier_problems(marked) == []
    assert full_tier_problems(marked[1:]) != []  # the kept seed's case is what the others name


def _pytest_markers(args: str) -> list[str]:
    """The -m expressions test.sh's two pytest lines get for these arguments (pytest itself replaced by
    an echo of its arguments)."""
    script = (REPO_ROOT / "test.sh").read_text()
    lines = [line for line in script.splitlines() if line.startswith(".venv/bin/python -m pytest")]
    assert len(lines) == 2
    setup = script.split("status=0", 1)[0].split("tier=", 1)[1]
    body = "tier=" + setup + "\n" + "\n".join(
        line.replace(".venv/bin/python -m pytest", "printf '%s|' ").replace(" || status=$?", "; echo")
        .replace(" || serial=$?", "; echo") for line in lines)
    out = subprocess.run(["bash", "-c", f"set -euo pipefail\nset -- {args}\n{body}"], capture_output=True,
                         text=True, check=True, cwd=Path(REPO_ROOT)).stdout
    return [row.split("-m|", 1)[1].split("|", 1)[0] + " / " + row.split("-m|", 1)[1].split("|", 1)[1]
            for row in out.splitlines()]


def test_test_sh_leaves_the_full_tier_out_unless_told() -> None:
    assert _pytest_markers("-k ingest") == [
        "not serial and not full / -k|ingest|",
        "serial and not full / -k|ingest|",
    ]
    assert _pytest_markers("--full -k ingest") == ["not serial / -k|ingest|", "serial / -k|ingest|"]
    assert _pytest_markers("") == ["not serial and not full / ", "serial and not full / "]
