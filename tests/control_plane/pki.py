"""The control plane's certificates: one throwaway CA (ECDSA P-256, valid for a day) per start, the serving
certificates of kube-apiserver, the webhook servers and KWOK's kubelet endpoint, and a client certificate per
identity (CN is the user name, O the groups, as the API server's x509 authenticator reads them)."""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path
from typing import Any


def private_file(path: Path, data: bytes) -> Path:
    """Write ``data`` to ``path`` readable by this user alone (0600) from the first byte: a key, a token file, a
    kubeconfig holding a client key. Written with a default umask and chmod-ed after, it was readable by every
    local user in between; a link at ``path`` is not followed."""
    import os

    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "wb") as out:
        os.fchmod(fd, 0o600)  # a file that was there keeps its mode through O_CREAT
        out.write(data)
    return path


@dataclass(frozen=True)
class Pair:
    cert: Path
    key: Path


@dataclass(frozen=True)
class Authority:
    folder: Path
    cert: Path
    key: Any

    def issue(
        self,
        stem: str,
        common_name: str,
        *,
        server: bool = False,
        client: bool = False,
        groups: tuple[str, ...] = (),
        ips: tuple[str, ...] = (),
        dns: tuple[str, ...] = (),
    ) -> Pair:
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes
        from cryptography.x509.oid import ExtendedKeyUsageOID

        key = _new_key()
        ca = x509.load_pem_x509_certificate(self.cert.read_bytes())
        # A server's certificate serves; a client's (the default) authenticates; etcd's peers do both (``client``).
        usages = [ExtendedKeyUsageOID.SERVER_AUTH] if server else []
        usages += [ExtendedKeyUsageOID.CLIENT_AUTH] if client or not server else []
        builder = (
            _builder(_name(common_name, groups), ca.subject, key.public_key())
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(self.key.public_key()), critical=False)
        )
        names = [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ips] + [x509.DNSName(d) for d in dns]
        if names:
            builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
        return _write(self.folder, stem, builder.sign(self.key, hashes.SHA256()), key)


def new_authority(folder: Path) -> Authority:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes

    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    key = _new_key()
    name = _name("pwdeploy control-plane CA", ())
    cert = (
        _builder(name, name, key.public_key())
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    pair = _write(folder, "ca", cert, key)
    return Authority(folder, pair.cert, key)


def signing_key(folder: Path) -> Pair:
    """The service-account token signing key (private) and its public half, for the API server and the
    controller manager."""
    from cryptography.hazmat.primitives import serialization

    key = _new_key()
    private, public = folder / "sa.key", folder / "sa.pub"
    private_file(
        private,
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()),
    )
    public.write_bytes(
        key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    return Pair(public, private)


def _new_key() -> Any:
    from cryptography.hazmat.primitives.asymmetric import ec

    return ec.generate_private_key(ec.SECP256R1())


def _name(common_name: str, groups: tuple[str, ...]) -> Any:
    from cryptography import x509
    from cryptography.x509.oid import NameOID

    attributes = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, g) for g in groups]
    return x509.Name([*attributes, x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _builder(subject: Any, issuer: Any, public_key: Any) -> Any:
    from cryptography import x509

    now = datetime.datetime.now(datetime.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
    )


def _write(folder: Path, stem: str, cert: Any, key: Any) -> Pair:
    from cryptography.hazmat.primitives import serialization

    pair = Pair(folder / f"{stem}.crt", folder / f"{stem}.key")
    pair.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    private_file(
        pair.key,
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()),
    )
    return pair
