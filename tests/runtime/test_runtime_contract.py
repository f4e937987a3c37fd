"""The runtime side of the contract: identity, loading, min wait."""

from __future__ import annotations

from pathlib import Path

import pytest

from kubepool.contract import (
    ENV_CONTRACT_FILE,
    ENV_INSTANCE_ID,
    Group,
    JobContract,
    build_contract,
    effective_min_wait,
    load_contract,
    parse_contract,
)


def two_groups() -> JobContract:
    return build_contract(
        job_name="job", namespace="ns", job_uid="u",
        groups=[Group(name="instance_group_1", instance_type="ml.c5.18xlarge", count=2, cpus=1.5),
                Group(name="instance_group_2", instance_type="ml.p3dn.24xlarge", count=1, gpus=8)],
        target_instances=3, min_instances=2,
    )


def test_identity() -> None:
    c = two_groups()
    me = c.identity(2)
    assert (me.is_head, me.group, me.rank_in_group, me.group_size, me.host) == (False, "instance_group_2", 0, 1, "algo-3")
    assert me.hosts == ["algo-1", "algo-2", "algo-3"] and c.identity(1).group_hosts == ["algo-1", "algo-2"]
    assert c.identity(0).is_head and c.head_address == "algo-1.job-svc" and c.instances[1].dns == "algo-2.job-svc"
    with pytest.raises(ValueError):
        c.identity(3)


def test_whole_cpus_round_up() -> None:
    assert [g.whole_cpus for g in two_groups().groups] == [2, 1]


def test_effective_min_wait() -> None:
    assert effective_min_wait(-1, 8, 720) == 9.0
    assert effective_min_wait(-1, 8, 50) == 5.0
    assert effective_min_wait(-1, 1, 720) == 0.0
    assert effective_min_wait(3, 8, 720) == 3


def test_load_contract(tmp_path: Path) -> None:
    path = tmp_path / "contract.json"
    path.write_text(two_groups().dumps())
    c, iid = load_contract({ENV_CONTRACT_FILE: str(path), ENV_INSTANCE_ID: "1"})
    assert iid == 1 and c == parse_contract(two_groups().dumps())
    with pytest.raises(KeyError):
        load_contract({ENV_CONTRACT_FILE: str(path)})
    with pytest.raises(FileNotFoundError):
        load_contract({ENV_CONTRACT_FILE: str(tmp_path / "missing"), ENV_INSTANCE_ID: "0"})
