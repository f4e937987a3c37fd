"""support.file_order: the files of the suite go to xdist's workers longest first (hack/test.sh), and the weights
come from a `--durations=0` output (hack/durations.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from support.file_order import WEIGHTS, file_of, file_order, file_weights, load_weights

REPO = Path(__file__).resolve().parent.parent

DURATIONS = """
============================= slowest durations ==============================
310.20s call     tests/b/test_long.py::test_job[two groups]
0.50s setup    tests/b/test_long.py::test_job[two groups]
12.00s call     tests/a/test_short.py::test_x
1.30s teardown tests/b/test_long.py::test_other
0.01s call     tests/c/test_unit.py::Test::test_y
(3 durations < 0.005s hidden.  Use -vv to show these durations.)
1 failed, 4 passed in 330.00s
"""


def test_weights_are_each_files_setup_call_and_teardown_longest_first() -> None:
    weights = file_weights(DURATIONS.splitlines())
    assert weights == {"tests/b/test_long.py": 312.0, "tests/a/test_short.py": 12.0, "tests/c/test_unit.py": 0.0}
    assert list(weights) == ["tests/b/test_long.py", "tests/a/test_short.py", "tests/c/test_unit.py"]


def test_heaviest_file_first_and_each_files_tests_in_their_order() -> None:
    ids = ["tests/a.py::t1", "tests/b.py::t1", "tests/a.py::t2", "tests/c.py::t1", "tests/b.py::t2[x::y]"]
    order = [ids[i] for i in file_order(ids, {"tests/a.py": 5.0, "tests/b.py": 50.0, "tests/c.py": 20.0})]
    assert order == ["tests/b.py::t1", "tests/b.py::t2[x::y]", "tests/c.py::t1", "tests/a.py::t1", "tests/a.py::t2"]


def test_each_file_with_an_exclusive_test_is_followed_by_free_files_of_about_its_weight() -> None:
    """The other worker runs files without cluster tests while an exclusive one holds the cluster; the free files
    left over come last, the files of shared cluster tests in between."""
    w = {"x1.py": 100.0, "x2.py": 40.0, "c.py": 500.0, "f1.py": 60.0, "f2.py": 50.0, "f3.py": 30.0, "f4.py": 5.0}
    ids = [f"{f}::t" for f in w]
    order = [file_of(ids[i]) for i in file_order(ids, w, exclusive={"x1.py", "x2.py"}, free={"f1.py", "f2.py", "f3.py", "f4.py"})]
    assert order == ["x1.py", "f1.py", "f2.py", "x2.py", "f3.py", "f4.py", "c.py"]
    order = [file_of(ids[i]) for i in file_order(ids, w, exclusive={"x1.py"}, free={"f3.py", "f4.py"})]
    assert order == ["x1.py", "f3.py", "f4.py", "c.py", "f1.py", "f2.py", "x2.py"]


def test_files_the_weights_do_not_know_go_first_in_collection_order() -> None:
    ids = ["tests/known.py::t", "tests/new2.py::t", "tests/new1.py::t", "tests/new2.py::u"]
    order = [ids[i] for i in file_order(ids, {"tests/known.py": 900.0})]
    assert order == ["tests/new2.py::t", "tests/new2.py::u", "tests/new1.py::t", "tests/known.py::t"]
    assert file_order(ids, {}) == [0, 1, 3, 2]


def test_the_script_writes_what_the_hook_reads(tmp_path: Path) -> None:
    (tmp_path / "run.log").write_text(DURATIONS)
    subprocess.run([sys.executable, str(REPO / "hack/durations.py"), str(tmp_path / "run.log"), str(tmp_path / "w.json")],
                   check=True, capture_output=True)
    assert load_weights(tmp_path / "w.json") == file_weights(DURATIONS.splitlines())
    assert load_weights(tmp_path / "missing.json") == {}


def test_the_weights_name_files_of_the_suite() -> None:
    """A stale weights file orders nothing: every file it names is still there."""
    weights = json.loads(WEIGHTS.read_text())
    assert weights and all((REPO / f).is_file() for f in weights), [f for f in weights if not (REPO / f).is_file()]
