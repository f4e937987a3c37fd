"""A real S3-compatible server on loopback for tests (moto's ThreadedMotoServer), and its client."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import boto3

CREDENTIALS = {"AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test", "AWS_DEFAULT_REGION": "us-east-1"}


@contextmanager
def s3_server(host: str = "127.0.0.1") -> Iterator[str]:
    """Starts the server; yields its endpoint URL."""
    from moto.server import ThreadedMotoServer

    with socket.socket() as s:
        s.bind((host, 0))
        port = int(s.getsockname()[1])
    server = ThreadedMotoServer(ip_address=host, port=port)
    server.start()
    try:
        yield f"http://{host}:{port}"
    finally:
        server.stop()


def client(endpoint: str) -> Any:
    return boto3.client("s3", endpoint_url=endpoint, aws_access_key_id=CREDENTIALS["AWS_ACCESS_KEY_ID"],
                        aws_secret_access_key=CREDENTIALS["AWS_SECRET_ACCESS_KEY"], region_name=CREDENTIALS["AWS_DEFAULT_REGION"])
