"""The local cluster's PKI: one CA, the apiserver's and etcd's serving certs, client certs, the service-account key
pair.

Owns every key and certificate under `.kubepool/pki/` and `issue_cert`, which other local components (the node
agent's kubelet serving and client certs) use to mint certs signed by the same CA. ECDSA P-256 keeps key
generation in the millisecond range, so a fresh `up` never waits on PKI.
"""

from __future__ import annotations

import datetime
import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

APISERVER_DNS = (
    "localhost",
    "kubernetes",
    "kubernetes.default",
    "kubernetes.default.svc",
    "kubernetes.default.svc.cluster.local",
)
APISERVER_IPS = ("127.0.0.1", "10.96.0.1")
_VALIDITY = datetime.timedelta(days=3650)


@dataclass(frozen=True)
class Pki:
    """Paths of every PKI file the control plane reads."""

    dir: Path

    def cert(self, name: str) -> Path:
        return self.dir / f"{name}.crt"

    def key(self, name: str) -> Path:
        return self.dir / f"{name}.key"

    @property
    def ca_cert(self) -> Path:
        return self.cert("ca")

    @property
    def ca_key(self) -> Path:
        return self.key("ca")

    @property
    def sa_key(self) -> Path:
        return self.dir / "sa.key"

    @property
    def sa_pub(self) -> Path:
        return self.dir / "sa.pub"


# name -> (CN, O): client identities of the control plane; the bootstrap RBAC roles bind these users/groups.
CLIENTS: dict[str, tuple[str, tuple[str, ...]]] = {
    "admin": ("kubepool-admin", ("system:masters",)),
    "kubelet-client": ("kube-apiserver-kubelet-client", ("system:masters",)),
    "controller-manager": ("system:kube-controller-manager", ()),
    "scheduler": ("system:kube-scheduler", ()),
    # etcd admits any client cert of the CA (--client-cert-auth): the apiserver's is the only one it needs.
    "apiserver-etcd-client": ("kube-apiserver-etcd-client", ()),
}
ETCD_IPS = ("127.0.0.1",)


def _new_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _name(cn: str, orgs: Iterable[str] = ()) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in orgs]
    return x509.Name([*attrs, x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _write(path: Path, data: bytes, private: bool = False) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_bytes(data)
    if private:
        tmp.chmod(0o600)
    tmp.replace(path)  # atomic: a crash never leaves half a key behind


def create_ca(cn: str = "kubepool-local-ca") -> tuple[bytes, bytes]:
    """A self-signed CA: (cert PEM, key PEM)."""
    key = _new_key()
    now = datetime.datetime.now(datetime.UTC)
    name = _name(cn)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + _VALIDITY)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True, key_cert_sign=True, crl_sign=True, content_commitment=False,
                key_encipherment=False, data_encipherment=False, key_agreement=False,
                encipher_only=False, decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return cert.public_bytes(serialization.Encoding.PEM), _key_pem(key)


def issue_cert(
    ca_cert_path: Path | str,
    ca_key_path: Path | str,
    *,
    cn: str,
    orgs: Iterable[str] = (),
    dns: Iterable[str] = (),
    ips: Iterable[str] = (),
    server: bool = False,
    client: bool = False,
) -> tuple[bytes, bytes]:
    """Mint a leaf cert signed by the CA at the given paths: (cert PEM, key PEM).

    `server` adds serverAuth (give `dns`/`ips` SANs), `client` adds clientAuth; Kubernetes reads the user from
    `cn` and the groups from `orgs`.
    """
    if not (server or client):
        raise ValueError("issue_cert needs server=True and/or client=True")
    ca_cert = x509.load_pem_x509_certificate(Path(ca_cert_path).read_bytes())
    ca_key = serialization.load_pem_private_key(Path(ca_key_path).read_bytes(), password=None)
    if not isinstance(ca_key, ec.EllipticCurvePrivateKey):
        raise TypeError(f"{ca_key_path}: expected an ECDSA CA key")
    key = _new_key()
    now = datetime.datetime.now(datetime.UTC)
    usages = ([ExtendedKeyUsageOID.SERVER_AUTH] if server else []) + (
        [ExtendedKeyUsageOID.CLIENT_AUTH] if client else []
    )
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(cn, orgs))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + _VALIDITY)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True, key_encipherment=False, key_cert_sign=False, crl_sign=False,
                content_commitment=False, data_encipherment=False, key_agreement=False,
                encipher_only=False, decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
        )
    )
    sans: list[x509.GeneralName] = [x509.DNSName(d) for d in dns]
    sans += [x509.IPAddress(ipaddress.ip_address(i)) for i in ips]
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    cert = builder.sign(ca_key, hashes.SHA256())
    return cert.public_bytes(serialization.Encoding.PEM), _key_pem(key)


def ensure_pki(pki_dir: Path) -> Pki:
    """Create whatever of the control plane's PKI is missing under `pki_dir`; existing files are kept."""
    pki = Pki(pki_dir)
    if not (pki.ca_cert.exists() and pki.ca_key.exists()):
        cert, key = create_ca()
        _write(pki.ca_key, key, private=True)
        _write(pki.ca_cert, cert)
    def missing(name: str) -> bool:
        return not (pki.cert(name).exists() and pki.key(name).exists())

    def store(name: str, pair: tuple[bytes, bytes]) -> None:
        _write(pki.key(name), pair[1], private=True)
        _write(pki.cert(name), pair[0])

    if missing("apiserver"):
        store("apiserver", issue_cert(pki.ca_cert, pki.ca_key, cn="kube-apiserver", dns=APISERVER_DNS,
                                      ips=APISERVER_IPS, server=True))
    if missing("etcd"):  # serves clients and peers; a peer both serves and connects, hence client too
        store("etcd", issue_cert(pki.ca_cert, pki.ca_key, cn="kubepool-etcd", dns=("localhost",), ips=ETCD_IPS,
                                 server=True, client=True))
    for name, (cn, orgs) in CLIENTS.items():
        if missing(name):
            store(name, issue_cert(pki.ca_cert, pki.ca_key, cn=cn, orgs=orgs, client=True))
    if not (pki.sa_key.exists() and pki.sa_pub.exists()):
        sa = _new_key()
        _write(pki.sa_key, _key_pem(sa), private=True)
        _write(
            pki.sa_pub,
            sa.public_key().public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
            ),
        )
    return pki
