"""A corpus of manifests the operator could never run, each refused by the API server itself at `kubectl apply`
(schema and CEL rules generated from kubepool.api) with a message naming the field: `refused/*.yaml`, each with
its expected message on a `# refused:` line. `accepted/*.yaml` are their valid neighbours, so a rule that
refuses too much fails too. Server-side dry runs against the tests' real API server; no operator needed.

What the operator itself still refuses later (status.reason while PENDING) depends on the cluster's state, not on
the spec: a pool that does not exist, is suspended or is too small (controller/admission.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.api  # the API server alone: no operator, no pod runs (make test-fast)

HERE = Path(__file__).parent
REFUSED = sorted((HERE / "refused").glob("*.yaml"))
ACCEPTED = sorted((HERE / "accepted").glob("*.yaml"))


def _expected(path: Path) -> str:
    lines = [line.removeprefix("# refused: ") for line in path.read_text().splitlines() if line.startswith("# refused: ")]
    assert len(lines) == 1, f"{path.name}: one `# refused: <message>` line"
    return lines[0]


def test_corpus_is_there() -> None:
    assert len(REFUSED) >= 18 and ACCEPTED


@pytest.mark.parametrize("path", REFUSED, ids=[p.stem for p in REFUSED])
def test_refused_at_apply_naming_the_field(kubectl: Any, crds: None, namespace: str, path: Path) -> None:
    expected = _expected(path)
    assert expected.startswith("spec."), "the expected message names the field"
    proc = kubectl("apply", "--dry-run=server", "-n", namespace, "-f", str(path))
    assert proc.returncode != 0, f"accepted: {path.name}\n{proc.stdout}"
    assert expected in proc.stderr, proc.stderr


@pytest.mark.parametrize("path", ACCEPTED, ids=[p.stem for p in ACCEPTED])
def test_valid_neighbours_accepted(kubectl: Any, crds: None, namespace: str, path: Path) -> None:
    proc = kubectl("apply", "--dry-run=server", "-n", namespace, "-f", str(path))
    assert proc.returncode == 0, proc.stderr
