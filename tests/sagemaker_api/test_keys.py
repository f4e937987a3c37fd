"""The access key format: what the CLI writes is what the server reads back; the keys Secret holds every key as
one entry, and an entry without its bound namespace, malformed, or in a Secret not labelled as the keys', grants
nothing."""

import base64
import json

import pytest

from kubepool.sagemaker_api import keys

NAME = keys.keys_secret_name("kubepool-sagemaker-api")


def test_new_key_shape_and_round_trip():
    key_id, secret = keys.new_key()
    assert keys.valid_key_id(key_id) and len(secret) == 40
    other = keys.new_key()
    data = {**keys.key_entry(key_id, secret, "team-a", service_account="trainer"), **keys.key_entry(*other, "team-b")}
    body = keys.keys_secret("kubepool-system", NAME, data)
    assert body["metadata"] == {"name": "kubepool-sagemaker-api-keys", "namespace": "kubepool-system",
                                "labels": {keys.KEY_LABEL: "true"}}
    assert NAME == keys.DEFAULT_KEYS_SECRET and sorted(body["data"]) == sorted([key_id, other[0]])
    assert keys.parse_key(body, key_id) == keys.AccessKey(key_id, secret, "team-a", "trainer")
    assert keys.parse_key(body, other[0]) == keys.AccessKey(*other, "team-b", "default")
    assert keys.parse_key(body, keys.new_key()[0]) is None  # not an entry


def test_without_its_bound_namespace_a_key_grants_nothing():
    key_id, secret = keys.new_key()
    body = keys.keys_secret("kubepool-system", NAME, keys.key_entry(key_id, secret, "team-a", "trainer"))
    value = json.loads(base64.b64decode(body["data"][key_id]))
    del value[keys.NAMESPACE_FIELD]
    body["data"][key_id] = base64.b64encode(json.dumps(value).encode()).decode()
    assert keys.parse_key(body, key_id) is None
    with pytest.raises(ValueError, match="bound to a namespace"):
        keys.key_entry(key_id, secret, "")


def test_malformed_secrets_grant_nothing():
    key_id, secret = keys.new_key()
    good = keys.keys_secret("s", NAME, keys.key_entry(key_id, secret, "ns"))
    assert keys.parse_key(good, key_id) is not None
    unlabelled = {**good, "metadata": {**good["metadata"], "labels": {}}}
    assert keys.parse_key(unlabelled, key_id) is None
    for raw in ("not base64!", base64.b64encode(b"not json").decode(), base64.b64encode(b'"a string"').decode(),
                base64.b64encode(json.dumps({"secretAccessKey": "short", "namespace": "ns"}).encode()).decode()):
        assert keys.parse_key({**good, "data": {key_id: raw}}, key_id) is None, raw
    assert keys.parse_key({**good, "data": {"not-a-key-id": good["data"][key_id]}}, "not-a-key-id") is None
    with pytest.raises(ValueError):
        keys.key_entry("AKIA" + key_id[4:], secret, "ns")
