"""The operator's results store (#38 item 3): where a head's result too large for its MLJob goes when the job has
no spec.output. The setting, the contract's decision and the head's credentials, as pure functions."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from kubepool import contract
from kubepool.api.mljob import S3Source
from kubepool.controller.builders.jobcontract import build_job_contract, results_store
from kubepool.controller.builders.pods import CREDENTIAL_KEYS, build_instance_pods
from kubepool.controller.config import ENV_PREFIX, OperatorConfig
from support.factories import job, pool

STORE = S3Source(uri="s3://results/kept/", endpoint_url="http://s3.local:9000", credentials_secret="results-keys")
OUTPUT = {"s3": {"uri": "s3://mine/out"}}


def test_a_job_without_output_keeps_its_large_result_in_the_store_under_its_namespace() -> None:
    target, secret = results_store(job(), STORE)
    assert target == contract.OutputTarget(location="s3://results/kept/ns", s3_uri="s3://results/kept/ns",
                                           s3_endpoint_url="http://s3.local:9000")
    assert secret == "results-keys"


def test_no_setting_or_the_jobs_own_output_means_no_store() -> None:
    assert results_store(job(), None) == (None, None)
    assert results_store(job(output=OUTPUT), STORE) == (None, None)  # spec.output wins


def test_the_contract_carries_the_store_only_for_a_job_without_output() -> None:
    pools = {"cpu": pool()}
    doc = build_job_contract(job(), pools, store=STORE)
    assert doc.results_store is not None and doc.results_store.location == "s3://results/kept/ns"
    assert doc.results_store_secret == "results-keys"
    assert build_job_contract(job(), pools).results_store is None
    own = build_job_contract(job(output=OUTPUT), pools, store=STORE)
    assert own.results_store is None and own.output is not None
    # The runtime reads it back from the ConfigMap's JSON.
    again = contract.JobContract.model_validate_json(doc.model_dump_json(by_alias=True))
    assert again.results_store == doc.results_store and again.results_store_secret == "results-keys"


def _env(p: dict) -> tuple[list[dict], dict[str, str]]:
    c = p["spec"]["containers"][0]
    return c.get("envFrom", []), {e["name"]: e.get("value", "") for e in c["env"]}


def test_only_the_head_takes_the_stores_secret_prefixed_and_optional() -> None:
    cfg = OperatorConfig(results_store=STORE.uri, results_store_credentials_secret="results-keys")
    head, worker = build_instance_pods(job(targetInstances=2), {"cpu": pool()}, granted=2, attempt=0, cfg=cfg)
    env_from, env = _env(head)
    assert {"prefix": contract.RESULTS_STORE_ENV_PREFIX,
            "secretRef": {"name": "results-keys", "optional": True}} in env_from
    hidden = env[contract.ENV_SECRET_ENV].split(",")  # kept out of the termination message
    assert all(contract.RESULTS_STORE_ENV_PREFIX + k in hidden for k in CREDENTIAL_KEYS)
    assert not any("prefix" in e for e in _env(worker)[0])
    own, = build_instance_pods(job(output=OUTPUT), {"cpu": pool()}, granted=1, attempt=0, cfg=cfg)
    assert not any("prefix" in e for e in _env(own)[0])


def test_the_setting_is_read_from_the_environment_and_only_s3_is_taken() -> None:
    env = {ENV_PREFIX + "RESULTS_STORE": "s3://results/kept", ENV_PREFIX + "RESULTS_STORE_ENDPOINT_URL": "http://s3:9000",
           ENV_PREFIX + "RESULTS_STORE_CREDENTIALS_SECRET": "results-keys"}
    assert OperatorConfig.from_env(env).results_location == S3Source(uri="s3://results/kept", endpoint_url="http://s3:9000",
                                                                  credentials_secret="results-keys")
    assert OperatorConfig.from_env({}).results_location is None
    with pytest.raises(ValueError, match="RESULTS_STORE must be an s3://bucket/prefix URI, got 'pvc://"):
        OperatorConfig.from_env({ENV_PREFIX + "RESULTS_STORE": "pvc://claim/results"})
    with pytest.raises(ValidationError):
        OperatorConfig.from_env({ENV_PREFIX + "RESULTS_STORE": "s3://B"})
    with pytest.raises(ValueError, match="need KUBEPOOL_OPERATOR_RESULTS_STORE"):
        OperatorConfig.from_env({ENV_PREFIX + "RESULTS_STORE_CREDENTIALS_SECRET": "results-keys"})
