"""`make test` runs the unit-level mutations of hack/mutants/mutants.toml: each protection, disabled on a scratch
copy of the repository, must make its named tests fail (`make mutants` adds the cluster-level ones)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[3]
RUNNER = ROOT / "hack" / "mutants" / "run.py"


def _runner() -> Any:
    spec = importlib.util.spec_from_file_location("kubepool_mutants_run", RUNNER)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


def test_every_entry_applies_to_the_tree_as_it_is() -> None:
    """A stale entry (its old text gone or repeated) fails here at once, naming the entry."""
    run = _runner()
    stale = {m.name: why for m in run.load() if (why := run.stale(m))}
    assert not stale, stale


def test_every_entry_has_its_row_in_docs_reliability() -> None:
    """docs/reliability.md lists each protection with its test and its mutation: an entry without a row is not."""
    doc = (ROOT / "docs" / "reliability.md").read_text()
    missing = [m.name for m in _runner().load() if f"`{m.name}`" not in doc]
    assert not missing, f"add a row to docs/reliability.md's Mutations table for {missing}"


@pytest.mark.slow  # minutes of 2 cores: make test runs it, make test-fast leaves it out
def test_no_unit_level_mutation_survives() -> None:
    proc = subprocess.run([sys.executable, str(RUNNER), "--level", "unit", "--timeout", "300"], cwd=ROOT,
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-2000:]
    assert " 0 not " in proc.stdout, proc.stdout[-3000:]
