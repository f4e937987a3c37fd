"""The runtime image's Dockerfile and pins, checked structurally (no Docker on CI machines)."""

from __future__ import annotations

import re
from importlib.metadata import version
from pathlib import Path

IMAGE = Path(__file__).resolve().parents[2] / "runtime-image"


def instructions() -> list[tuple[str, str]]:
    text = re.sub(r"\\\n", " ", (IMAGE / "Dockerfile").read_text())
    return [(ln.split(None, 1)[0].upper(), ln.split(None, 1)[1]) for ln in text.splitlines() if ln.strip() and not ln.startswith("#")]


def test_multi_stage_pinned_non_root_with_cuda_switch() -> None:
    ins = instructions()
    froms = [arg for op, arg in ins if op == "FROM"]
    assert froms == ["${PYTHON_IMAGE} AS builder", "builder AS wheel", "${BASE_IMAGE}"]
    args = dict(arg.split("=", 1) for op, arg in ins if op == "ARG" and "=" in arg)
    assert re.fullmatch(r"python:3\.11\.\d+-slim-\w+", args["PYTHON_IMAGE"])
    assert args["BASE_IMAGE"] == "${PYTHON_IMAGE}"
    assert [arg for op, arg in ins if op == "USER"] == ["1000:1000"]
    assert ins[-1] == ("ENTRYPOINT", '["/usr/bin/tini", "--", "python", "-m", "kubepool.runtime"]')


def stages() -> list[list[tuple[str, str]]]:
    found: list[list[tuple[str, str]]] = []
    for op, arg in instructions():
        if op == "FROM":
            found.append([])
        if found:  # the global ARGs come before the first FROM
            found[-1].append((op, arg))
    return found


def test_kubepool_is_the_final_stages_last_layer_over_a_venv_without_it() -> None:
    """A source change must leave the venv's layer (GBs) as it was: the builder's venv has the pinned packages
    only, and the final stage installs kubepool's wheel after copying it and after every other file layer."""
    builder, wheel, final = stages()
    assert not any(op == "COPY" and arg.split()[0] in ("src", "pyproject.toml") for op, arg in builder)
    assert any(op == "RUN" and "pip wheel" in arg for op, arg in wheel)
    files = [i for i, (op, _) in enumerate(final) if op in ("COPY", "RUN")]
    venv = final.index(("COPY", "--from=builder /opt/venv /opt/venv"))
    wheel_copy = next(i for i, (op, arg) in enumerate(final) if op == "COPY" and arg.startswith("--from=wheel"))
    assert venv < wheel_copy and files[-2:] == [wheel_copy, wheel_copy + 1]
    assert "pip install" in final[wheel_copy + 1][1]


def test_the_shipped_pythons_standard_library_is_compiled() -> None:
    """python:3.11-slim deletes its .pyc files; in a pod (read-only root) every process of an instance would compile
    each stdlib module it imports at every start. The builder compiles its Python's stdlib, and the final stage
    takes that Python (/usr/local) from the builder."""
    builder, _, final = stages()
    assert any(op == "RUN" and "-m compileall" in arg and 'get_path("stdlib")' in arg for op, arg in builder)
    assert ("COPY", "--from=builder /usr/local /usr/local") in final


def test_requirements_are_pinned_and_match_the_tested_versions() -> None:
    pins = {}
    for line in (IMAGE / "requirements.txt").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, _, ver = line.partition("==")
            assert ver, f"not pinned: {line}"
            pins[re.sub(r"\[.*\]", "", name)] = ver
    assert {"ray", "torch", "xgboost", "boto3", "cloudpickle", "pydantic", "sagemaker-training"} <= set(pins)
    # sagemaker-training: the toolkit the process-node tests run (a dev dependency) is the one the image ships.
    for name in ("ray", "xgboost", "cloudpickle", "sagemaker-training"):
        assert version(name) == pins[name]
