"""Fixtures of the SageMaker-API tests (support.sagemaker_api): one server for the session, and access keys.

    def test_x(sagemaker_api, sagemaker_key, namespace):
        sm = sagemaker_api.client("sagemaker", sagemaker_key(namespace))
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from support.operator_fixtures import apply, compute_pool, crds, operator  # noqa: F401 - shared, registered here
from support.sagemaker_api import (  # noqa: F401 - REGION, USER_RULES, grant_user_rights: also importable from here
    REGION,
    USER_RULES,
    Key,
    SageMakerApi,
    delete_key,
    grant_user_rights,
    make_key,
    start_sagemaker_api,
)


@pytest.fixture(scope="session")
def sagemaker_api(cluster: Any, crds: None,  # noqa: F811 - the shared fixture, as a parameter
                  tmp_path_factory: pytest.TempPathFactory) -> Iterator[SageMakerApi]:
    """One server for the session, without an S3 endpoint of its own (start_sagemaker_api for one with)."""
    with start_sagemaker_api(cluster.kubeconfig, tmp_path_factory.mktemp("sagemaker-api") / "server.log") as api:
        yield api


@pytest.fixture
def sagemaker_key(kubectl: Any) -> Iterator[Callable[..., Key]]:
    """`sagemaker_key(namespace, service_account=None, rights=True)`: see make_key; the keys go with the test."""
    made: list[Key] = []

    def make(namespace: str, service_account: str | None = None, rights: bool = True) -> Key:
        made.append(make_key(kubectl, namespace, service_account, rights))
        return made[-1]
    yield make
    for key in made:
        delete_key(kubectl, key)
