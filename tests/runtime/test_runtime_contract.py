"""The runtime side of the contract: identity, loading, min wait."""

from __future__ import annotations

from pathlib import Path

import pytest

from kubepool.contract import (
    ENV_CONTRACT_FILE,
    ENV_INSTANCE_ID,
    Group,
    JobContract,
    build_instances,
    effective_min_wait,
    load_contract,
    parse_contract,
)


def two_groups() -> JobContract:
    return JobContract(
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


def test_given_instances_are_kept_and_the_head_is_the_first() -> None:
    """A resized job's ids and a retry's pod names come in as `instances`: the model derives only what is missing."""
    groups = two_groups().groups
    resized = build_instances("job", groups, {"instance_group_1": [0, 3], "instance_group_2": [1]}, attempt=2)
    c = JobContract(job_name="job", namespace="ns", groups=groups, instances=resized, target_instances=3, min_instances=2)
    assert [(i.instance_id, i.group, i.host) for i in c.instances] == [
        (0, "instance_group_1", "algo-1"), (1, "instance_group_2", "algo-2"), (3, "instance_group_1", "algo-4")]
    assert [i.pod for i in c.instances] == ["job-instance-group-1-0-r2", "job-instance-group-2-0-r2", "job-instance-group-1-1-r2"]
    assert (c.head_address, c.service_name) == ("algo-1.job-svc", "job-svc")
    assert parse_contract(c.dumps()) == c and parse_contract(two_groups().dumps()) == two_groups()


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
