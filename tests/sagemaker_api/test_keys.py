"""The access key format: what the CLI writes is what the server reads back."""

import pytest

from kubepool.sagemaker_api import keys


def test_new_key_shape_and_round_trip():
    key_id, secret = keys.new_key()
    assert keys.valid_key_id(key_id) and len(secret) == 40
    body = keys.key_secret("team-a", "k1", key_id, secret, service_account="trainer")
    assert body["metadata"]["labels"] == {keys.KEY_LABEL: "true"}
    assert keys.parse_key_secret(body) == keys.AccessKey(key_id, secret, "team-a", "trainer")


def test_without_service_account_the_default_one():
    key_id, secret = keys.new_key()
    parsed = keys.parse_key_secret(keys.key_secret("ns", "k", key_id, secret))
    assert parsed is not None and parsed.service_account == "default"


def test_malformed_secrets_grant_nothing():
    key_id, secret = keys.new_key()
    good = keys.key_secret("ns", "k", key_id, secret)
    unlabelled = {**good, "metadata": {"name": "k", "namespace": "ns"}}
    assert keys.parse_key_secret(unlabelled) is None
    assert keys.parse_key_secret({**good, "data": {"accessKeyId": good["data"]["accessKeyId"]}}) is None
    short = keys.key_secret("ns", "k", key_id, secret)
    short["data"]["secretAccessKey"] = "c2hvcnQ="
    assert keys.parse_key_secret(short) is None
    with pytest.raises(ValueError):
        keys.key_secret("ns", "k", "AKIA" + key_id[4:], secret)
