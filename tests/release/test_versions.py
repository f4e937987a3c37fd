"""One version everywhere: pyproject.toml's is the release's, and the installed package, the chart (version and
appVersion, hence the images' default tag), the Argo CD Application, `kubepool version`, the operator's
`--version` and its `kubepool_build_info` metric all say the same. And the operator's dependencies: every
third-party module it imports is declared, and the constraints file pins what it runs with."""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
import tomllib
from importlib import metadata
from pathlib import Path

import yaml
from packaging.requirements import Requirement

import kubepool

REPO = Path(__file__).resolve().parents[2]
SRC = REPO / "src"


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def release_version() -> str:
    return tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]


def test_every_place_says_the_release_version() -> None:
    version = release_version()
    chart = yaml.safe_load((REPO / "charts/kubepool/Chart.yaml").read_text())
    app = yaml.safe_load((REPO / "deploy/argocd/application.yaml").read_text())
    found = {
        "installed package (importlib.metadata)": metadata.version("kubepool"),
        "kubepool.__version__": kubepool.__version__,
        "Chart.yaml version": chart["version"],
        "Chart.yaml appVersion": chart["appVersion"],
        "Argo CD Application targetRevision": app["spec"]["source"]["targetRevision"],
    }
    cli = subprocess.run([sys.executable, "-m", "kubepool.cli", "version", "--client", "-o", "json"],
                         capture_output=True, text=True, timeout=60, check=True)
    found["kubepool version"] = json.loads(cli.stdout)["clientVersion"]
    op = subprocess.run([sys.executable, "-m", "kubepool.controller", "--version"],
                        capture_output=True, text=True, timeout=60, check=True)
    found["python -m kubepool.controller --version"] = op.stdout.split()[-1]
    wrong = {where: v for where, v in found.items() if v != version}
    assert not wrong, f"pyproject.toml says {version}; these differ: {wrong}"


def test_build_info_metric_names_the_version() -> None:
    from prometheus_client import REGISTRY

    from kubepool.controller import metrics  # noqa: F401  (import = the metric's registration)
    assert REGISTRY.get_sample_value("kubepool_build_info", {"version": release_version()}) == 1


def _module_file(name: str) -> Path | None:
    base = SRC / Path(*name.split("."))
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.exists():
            return path
    return None


def _imports(path: Path, module: str) -> set[str]:
    """Absolute names every import statement of the file names (function-level imports too)."""
    names: set[str] = set()
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
            names.add(base)
            names.update(f"{base}.{a.name}" for a in node.names)
    return names


def operator_third_party_imports() -> set[str]:
    """Top-level third-party modules the operator's code imports: every module of kubepool.controller (some are
    imported by name at run time) and, transitively, each kubepool module they import."""
    todo = [f"kubepool.controller.{p.stem}" if p.name != "__init__.py" else "kubepool.controller"
            for p in (SRC / "kubepool/controller").glob("*.py")]
    seen: set[str] = set()
    third: set[str] = set()
    while todo:
        mod = todo.pop()
        if mod in seen:
            continue
        seen.add(mod)
        path = _module_file(mod)
        if path is None:
            continue  # a name imported from a module (`from x import func`), not a module
        for name in _imports(path, mod):
            top = name.split(".")[0]
            if top == "kubepool":
                parts = name.split(".")
                todo.extend(".".join(parts[:i]) for i in range(1, len(parts) + 1))
            elif top and top not in sys.stdlib_module_names and top != "__future__":
                third.add(top)
    return third


def test_every_third_party_import_of_the_operator_is_declared() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    declared = {_norm(Requirement(r).name) for r in project["dependencies"] + project["optional-dependencies"]["operator"]}
    dists = metadata.packages_distributions()
    imports = operator_third_party_imports()
    assert {"kopf", "prometheus_client", "pydantic"} <= imports  # the walk finds what it must
    undeclared = {m: dists.get(m) for m in imports if not {_norm(d) for d in dists.get(m, [m])} & declared}
    assert not undeclared, f"the operator imports these without pyproject declaring them (its image lacks them): {undeclared}"


def _constraints() -> dict[str, str]:
    pins = {}
    for line in (REPO / "constraints.txt").read_text().splitlines():
        line = line.split("#")[0].strip()
        if line:
            name, _, version = line.partition("==")
            assert version, f"constraints.txt pins exact versions: {line!r}"
            pins[_norm(name)] = version
    return pins


def _closure(name: str, extras: tuple[str, ...] = ()) -> set[str]:
    """Names of the installed distributions `name[extras]` needs (itself left out)."""
    out: set[str] = set()
    visited: set[tuple[str, tuple[str, ...]]] = set()
    todo = [(name, extras)]
    while todo:
        dist_name, ex = todo.pop()
        for r in metadata.requires(dist_name) or []:
            req = Requirement(r)
            if req.marker and not any(req.marker.evaluate({"extra": e}) for e in (ex or ("",))):
                continue
            key = (_norm(req.name), tuple(sorted(req.extras)))  # a package needed with an extra needs more
            if key not in visited and key[0] != "kubepool":
                visited.add(key)
                out.add(key[0])
                todo.append((req.name, key[1]))
    return out


def test_constraints_pin_the_operators_tested_dependencies() -> None:
    pins = _constraints()
    closure = _closure("kubepool", ("operator",))
    # Both ways: a dependency the operator gained is pinned, and a pin nothing needs any more goes.
    assert set(pins) == closure, f"unpinned: {closure - set(pins)}; pinned for nothing: {set(pins) - closure}"
    drift = {n: (v, metadata.version(n)) for n, v in pins.items() if metadata.version(n) != v}
    assert not drift, f"the venv runs other versions than constraints.txt pins (make venv): {drift}"
    for must in ("kopf", "aiohttp"):  # kopf's internals are fenced (controller/kopf_fence.py)
        assert must in pins


def test_the_operator_image_and_the_venv_install_from_the_constraints() -> None:
    dockerfile = (REPO / "operator" / "Dockerfile").read_text()
    installs = [line for line in dockerfile.splitlines() if "pip install" in line and "/src" in line]
    assert installs and all("-c /src/constraints.txt" in line for line in installs), installs
    assert "COPY pyproject.toml README.md constraints.txt /src/" in dockerfile
    assert "!constraints.txt" in (REPO / "operator" / "Dockerfile.dockerignore").read_text()
    venv_step = [line for line in (REPO / "Makefile").read_text().splitlines() if "pip install" in line and "-e '.[dev]'" in line]
    assert venv_step and all("-c constraints.txt" in line for line in venv_step), venv_step
