"""The README starts where a newcomer starts: the two commands first, short, every link there, the quick start's
commands valid for the CLI (tests/newcomer/test_fresh_clone.py runs them on a fresh clone's demo cluster), and
its own-cluster steps label the nodes the example pools select."""

from __future__ import annotations

import re

import yaml
from readme import README, commands

from kubepool import cli

EXAMPLE_POOLS = README.parent / "examples" / "computepools.yaml"


def test_the_two_commands_come_first_and_the_readme_is_short() -> None:
    lines = README.read_text().splitlines()
    assert len(lines) <= 120, f"README.md has {len(lines)} lines"
    head = lines[:40]
    assert any(line.startswith("make demo ") for line in head) and any(line.startswith("make test ") for line in head)


def test_every_local_link_exists() -> None:
    for target in re.findall(r"\]\(([^)#]+)\)", README.read_text()):
        if not target.startswith("http"):
            assert (README.parent / target).exists(), target


def test_quick_start_commands_parse() -> None:
    kubepool_lines = [words for words in commands("Quick start") if words[0] == "kubepool"]
    assert len(kubepool_lines) >= 5
    for words in kubepool_lines:
        cli.parse_args(words[1:])  # exits 2 on a usage error


def test_own_cluster_steps_label_what_the_example_pools_select() -> None:
    steps = commands("On your own cluster")
    labelled = {w for words in steps if words[:3] == ["kubectl", "label", "nodes"] for w in words if "=" in w}
    applied = [i for i, words in enumerate(steps) if "examples/computepools.yaml" in words]
    label_at = [i for i, words in enumerate(steps) if words[:3] == ["kubectl", "label", "nodes"]]
    assert applied and label_at and label_at[0] < applied[0], "the nodes are labelled before the pools are applied"
    cpu_pool = next(d for d in yaml.safe_load_all(EXAMPLE_POOLS.read_text()) if d["metadata"]["name"] == "cpu-pool")
    assert {f"{k}={v}" for k, v in cpu_pool["spec"]["nodeSelector"].items()} <= labelled
