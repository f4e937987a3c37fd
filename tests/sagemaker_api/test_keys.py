"""The access key format: what the CLI writes is what the server reads back; a key Secret without its bound
namespace, or named other than its id's name, grants nothing."""

import pytest

from kubepool.sagemaker_api import keys


def test_new_key_shape_and_round_trip():
    key_id, secret = keys.new_key()
    assert keys.valid_key_id(key_id) and len(secret) == 40
    body = keys.key_secret("kubepool-system", key_id, secret, "team-a", service_account="trainer")
    assert body["metadata"]["labels"] == {keys.KEY_LABEL: "true"}
    assert body["metadata"]["namespace"] == "kubepool-system"
    assert body["metadata"]["name"] == keys.secret_name(key_id) == f"sagemaker-key-{key_id.lower()}"
    assert keys.parse_key_secret(body) == keys.AccessKey(key_id, secret, "team-a", "trainer")


def test_without_service_account_the_default_one():
    key_id, secret = keys.new_key()
    parsed = keys.parse_key_secret(keys.key_secret("kubepool-system", key_id, secret, "ns"))
    assert parsed is not None and parsed.service_account == "default"


def test_without_its_bound_namespace_a_key_grants_nothing():
    key_id, secret = keys.new_key()
    body = keys.key_secret("kubepool-system", key_id, secret, "team-a", service_account="trainer")
    del body["metadata"]["annotations"][keys.NAMESPACE_ANNOTATION]
    assert keys.parse_key_secret(body) is None
    with pytest.raises(ValueError, match="bound to a namespace"):
        keys.key_secret("kubepool-system", key_id, secret, "")


def test_malformed_secrets_grant_nothing():
    key_id, secret = keys.new_key()
    good = keys.key_secret("s", key_id, secret, "ns")
    unlabelled = {**good, "metadata": {**good["metadata"], "labels": {}}}
    assert keys.parse_key_secret(unlabelled) is None
    assert keys.parse_key_secret({**good, "data": {"accessKeyId": good["data"]["accessKeyId"]}}) is None
    renamed = {**good, "metadata": {**good["metadata"], "name": "sagemaker-key-other"}}
    assert keys.parse_key_secret(renamed) is None
    short = keys.key_secret("s", key_id, secret, "ns")
    short["data"]["secretAccessKey"] = "c2hvcnQ="
    assert keys.parse_key_secret(short) is None
    with pytest.raises(ValueError):
        keys.key_secret("s", "AKIA" + key_id[4:], secret, "ns")
