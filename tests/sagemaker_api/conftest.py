"""Fixtures of the SageMaker-API tests (support.sagemaker_api): one server for the session, and access keys.

    def test_x(sagemaker_api, sagemaker_key, namespace):
        sm = sagemaker_api.client("sagemaker", sagemaker_key(namespace))
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
import yaml

from kubepool import naming
from support.operator_fixtures import apply, compute_pool, crds, operator  # noqa: F401 - shared, registered here
from support.s3 import CREDENTIALS
from support.sagemaker_api import (  # noqa: F401 - REGION, USER_RULES, grant_user_rights: also importable from here
    CREDENTIALS_SECRET,
    REGION,
    USER_RULES,
    Key,
    SageMakerApi,
    delete_key,
    grant_user_rights,
    make_key,
    s3_with_data,
    sagemaker_api_with_s3,
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


# The SDK modules' data: a moto server at the module's S3_ADDRESS with its BUCKET, and a server with those data
# settings (moto keeps one store per process: each module names a bucket of its own).
@pytest.fixture(scope="module")
def s3_endpoint(request: pytest.FixtureRequest) -> Iterator[str]:
    with s3_with_data(request.module.S3_ADDRESS, request.module.BUCKET) as url:
        yield url


@pytest.fixture(scope="module")
def server_with_s3(cluster: Any, crds: None, s3_endpoint: str,  # noqa: F811 - the shared fixture, as a parameter
                   tmp_path_factory: pytest.TempPathFactory) -> Iterator[SageMakerApi]:
    """The server with the platform team's data settings: the S3 endpoint and the namespace's credentials Secret."""
    log = tmp_path_factory.mktemp("sagemaker-api-s3") / "server.log"
    with sagemaker_api_with_s3(cluster.kubeconfig, log, s3_endpoint, CREDENTIALS_SECRET) as api:
        yield api


@pytest.fixture
def s3_credentials(kubectl: Any, namespace: str) -> str:
    """The test namespace's S3 credentials Secret (support.s3's keys), which server_with_s3's jobs read."""
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": CREDENTIALS_SECRET,
              "labels": {naming.LABEL_CREDENTIALS: "true"}}, "stringData": CREDENTIALS}
    kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump(secret), check=True)
    return CREDENTIALS_SECRET
