"""hack/pytest.py, which `make test` runs pytest through: pytest's status comes back, Python's exit handlers run,
and the interpreter's teardown (where native libraries' destructors crashed a CI run after every test passed)
does not."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from kubepool.local.layout import REPO_ROOT

CASE = '''
import atexit, pathlib, sys

OUT = pathlib.Path({out!r})


class Teardown:
    def __del__(self, path=str(OUT / "teardown"), write=open):  # module globals may be gone by then
        with write(path, "w") as f:
            f.write("ran")


KEPT = Teardown()  # a module global: released only by the interpreter's teardown
atexit.register(lambda: OUT.joinpath("atexit").write_text("ran"))


def test_case():
    assert {passes}
'''


def _run(tmp_path: Path, passes: bool, pytest: tuple[str, ...] = ("hack/pytest.py",)) -> int:
    """Run the case under `pytest` (the wrapper, or ("-m", "pytest"): plain pytest); its exit status."""
    case = tmp_path / "case" / "test_case.py"
    case.parent.mkdir(exist_ok=True)
    case.write_text(CASE.format(out=str(tmp_path), passes=passes))
    return subprocess.run([sys.executable, *pytest, "-q", "-p", "no:cacheprovider", str(case)],
                          cwd=REPO_ROOT, capture_output=True, timeout=120).returncode


def test_status_kept_exit_handlers_run_teardown_skipped(tmp_path: Path) -> None:
    assert _run(tmp_path, passes=True) == 0
    assert (tmp_path / "atexit").read_text() == "ran"
    assert not (tmp_path / "teardown").exists()
    assert _run(tmp_path, passes=False) == 1


def test_without_the_wrapper_the_teardown_runs(tmp_path: Path) -> None:
    """The control: the same case under plain pytest reaches the teardown, so the check above can fail."""
    assert _run(tmp_path, passes=True, pytest=("-m", "pytest")) == 0
    assert (tmp_path / "teardown").read_text() == "ran"
