"""--tls-cert/--tls-key: the server speaks HTTPS, and boto3, trusting the certificate's CA, reaches it (an
unknown operation's AWS error needs no cluster); plain HTTP to it fails. The certificate is made here."""

from __future__ import annotations

import datetime
import ipaddress
import urllib.request
from pathlib import Path

import pytest
from botocore.exceptions import ClientError
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from support.sagemaker_api import Key, start_sagemaker_api


def _self_signed(tmp: Path) -> tuple[Path, Path]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=1))
            .not_valid_after(now + datetime.timedelta(hours=1))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    crt, pem = tmp / "tls.crt", tmp / "tls.key"
    crt.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    pem.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                      serialization.NoEncryption()))
    return crt, pem


def test_https_with_the_given_certificate(tmp_path: Path) -> None:
    crt, pem = _self_signed(tmp_path)
    with start_sagemaker_api(tmp_path / "no-kubeconfig", tmp_path / "server.log", "--tls-cert", str(crt),
                             "--tls-key", str(pem), ca_file=crt) as api:
        sm = api.client("sagemaker", Key("KP" + "A" * 18, "s" * 40, "ns"), verify=str(crt))
        with pytest.raises(ClientError) as e:  # an operation the server does not serve: refused before any key
            sm.list_notebook_instances()
        assert e.value.response["Error"]["Code"] == "UnknownOperationException"
        with pytest.raises(OSError):
            urllib.request.urlopen(api.endpoint.replace("https:", "http:") + "/healthz", timeout=5)
