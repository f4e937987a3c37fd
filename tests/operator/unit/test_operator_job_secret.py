"""The job's Secret (its contract and Ray token, one object): one create on a job's first pass, the contract's key
patched for a later attempt while the token stays as created; a Secret that is not (or no longer) the job's is
never written (jobchildren._write_job_secret over the FakeApi)."""

from __future__ import annotations

import base64

import pytest

from kubepool import contract
from kubepool.controller import jobchildren
from kubepool.controller.builders import JobRef, build_job_contract, build_job_secret
from kubepool.controller.jobreconcile import reconcile_job
from kubepool.kube.errors import Foreign, Going
from support.factories import job, pool
from support.fake_api import FakeApi
from support.operator import operator_state

POOLS = {"cpu": pool()}
REF = JobRef("train", "ns", "u1")


def _data(api: FakeApi, key: str) -> str:
    return base64.b64decode(api.objects[("Secret", "train-contract")]["data"][key]).decode()


async def test_first_pass_is_one_create_holding_contract_and_token() -> None:
    op, api, _ = operator_state([job(targetInstances=2)], [pool(max_nodes=3)])
    await reconcile_job(op, ("ns", "train"))
    assert api.count("create", "Secret") == 1 and not api.count("patch") and not api.count("apply", "ConfigMap")
    assert not any(kind == "ConfigMap" for kind, _ in api.objects), "no contract ConfigMap any more"
    assert contract.parse_contract(_data(api, contract.CONTRACT_FILENAME)).job_name == "train"
    assert len(_data(api, "token")) > 20


async def test_later_contract_patches_its_key_and_keeps_the_token() -> None:
    op, api, _ = operator_state()
    await jobchildren._write_job_secret(op, REF, build_job_contract(job(), POOLS), "tok-1", written=False)
    later = build_job_contract(job(), POOLS, attempt=1)
    await jobchildren._write_job_secret(op, REF, later, "tok-2", written=True)
    assert api.calls == [("create", "Secret/train-contract"), ("patch", "Secret/train-contract")]
    assert _data(api, contract.CONTRACT_FILENAME) == later.dumps() and _data(api, "token") == "tok-1"


async def test_after_a_restart_the_jobs_own_secret_is_found_then_patched() -> None:
    op, api, _ = operator_state()
    await jobchildren._write_job_secret(op, REF, build_job_contract(job(), POOLS), "tok-1", written=False)
    later = build_job_contract(job(), POOLS, attempt=1)
    await jobchildren._write_job_secret(op, REF, later, "tok-2", written=False)  # a new process: nothing written yet
    assert [v for v, _ in api.calls] == ["create", "create", "patch"]
    assert _data(api, contract.CONTRACT_FILENAME) == later.dumps() and _data(api, "token") == "tok-1"


@pytest.mark.parametrize("owner", ["old-uid", "other"], ids=["earlier-same-name-job", "not-a-job"])
async def test_a_secret_not_the_jobs_is_never_written(owner: str) -> None:
    op, api, _ = operator_state()
    theirs = build_job_secret(JobRef("train", "ns", owner), build_job_contract(job(), POOLS), "theirs")
    if owner == "other":
        theirs["metadata"]["ownerReferences"] = []
    api.objects[("Secret", "train-contract")] = theirs
    for written in (True, False):
        with pytest.raises(Going if owner == "old-uid" else Foreign):
            await jobchildren._write_job_secret(op, REF, build_job_contract(job(), POOLS, attempt=1), "t", written)
    assert _data(api, "token") == "theirs" and api.objects[("Secret", "train-contract")] is theirs
