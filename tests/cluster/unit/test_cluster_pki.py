"""Unit tests of the local cluster's PKI (no cluster needed)."""

from __future__ import annotations

import ipaddress
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from kubepool.local.pki import APISERVER_DNS, ensure_pki, issue_cert


def _load(path: Path) -> x509.Certificate:
    return x509.load_pem_x509_certificate(path.read_bytes())


def _signed_by(cert: x509.Certificate, ca: x509.Certificate) -> bool:
    key = ca.public_key()
    assert isinstance(key, ec.EllipticCurvePublicKey)
    assert cert.signature_hash_algorithm is not None
    key.verify(cert.signature, cert.tbs_certificate_bytes, ec.ECDSA(cert.signature_hash_algorithm))
    return cert.issuer == ca.subject


def _eku(cert: x509.Certificate) -> set[x509.ObjectIdentifier]:
    return set(cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value)


def test_apiserver_cert_has_all_sans_and_chains_to_the_ca(tmp_path: Path) -> None:
    pki = ensure_pki(tmp_path)
    ca, srv = _load(pki.ca_cert), _load(pki.cert("apiserver"))
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    assert _signed_by(srv, ca)
    sans = srv.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert set(sans.get_values_for_type(x509.DNSName)) == set(APISERVER_DNS)
    assert set(sans.get_values_for_type(x509.IPAddress)) == {
        ipaddress.ip_address("127.0.0.1"), ipaddress.ip_address("10.96.0.1")
    }
    assert _eku(srv) == {ExtendedKeyUsageOID.SERVER_AUTH}


def test_admin_is_a_system_masters_client(tmp_path: Path) -> None:
    pki = ensure_pki(tmp_path)
    admin = _load(pki.cert("admin"))
    assert admin.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)[0].value == "system:masters"
    assert _eku(admin) == {ExtendedKeyUsageOID.CLIENT_AUTH}
    assert _signed_by(admin, _load(pki.ca_cert))
    assert pki.sa_key.read_bytes().startswith(b"-----BEGIN PRIVATE KEY-----")
    assert pki.sa_pub.read_bytes().startswith(b"-----BEGIN PUBLIC KEY-----")
    assert pki.ca_key.stat().st_mode & 0o077 == 0


def test_etcd_serves_loopback_and_the_apiserver_has_its_own_etcd_client(tmp_path: Path) -> None:
    pki = ensure_pki(tmp_path)
    etcd, client = _load(pki.cert("etcd")), _load(pki.cert("apiserver-etcd-client"))
    sans = etcd.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert sans.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("127.0.0.1")]
    assert _eku(etcd) == {ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH}  # peers do both
    assert _eku(client) == {ExtendedKeyUsageOID.CLIENT_AUTH}
    assert not client.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)  # no group: never system:masters
    assert _signed_by(etcd, _load(pki.ca_cert)) and _signed_by(client, _load(pki.ca_cert))


def test_ensure_pki_keeps_existing_files(tmp_path: Path) -> None:
    ensure_pki(tmp_path)
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    ensure_pki(tmp_path)
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before


def test_issue_cert_for_a_kubelet(tmp_path: Path) -> None:
    pki = ensure_pki(tmp_path)
    cert_pem, key_pem = issue_cert(
        pki.ca_cert, pki.ca_key, cn="system:node:cpu-node-1", orgs=("system:nodes",),
        dns=("cpu-node-1",), ips=("127.0.1.1",), server=True, client=True,
    )
    cert = x509.load_pem_x509_certificate(cert_pem)
    assert cert.subject.rfc4514_string() == "CN=system:node:cpu-node-1,O=system:nodes"
    assert _eku(cert) == {ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH}
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert sans.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("127.0.1.1")]
    assert _signed_by(cert, _load(pki.ca_cert))
    assert b"PRIVATE KEY" in key_pem


def test_issue_cert_needs_a_usage(tmp_path: Path) -> None:
    pki = ensure_pki(tmp_path)
    with pytest.raises(ValueError):
        issue_cert(pki.ca_cert, pki.ca_key, cn="nobody")
