"""A throwaway certificate authority for one test session, and the certificates the loopback stubs serve with.

Made once per process with the ``cryptography`` package (ECDSA P-256, valid for a day), in a temporary folder that
is removed at exit: the CA (given to pwdeploy and kubectl as ``certificate-authority-data``), a server certificate
for 127.0.0.1 and localhost, one for ``kubernetes.default.svc`` only (what ``tls-server-name`` names), a client
certificate per user name (CN, as the API server's x509 authenticator reads it), and a second CA nobody trusts.
"""

from __future__ import annotations

import atexit
import datetime
import functools
import ipaddress
import shutil
import ssl
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SERVER_NAME = "kubernetes.default.svc"  # in the named certificate only: reachable by tls-server-name alone


@dataclass(frozen=True)
class Issued:
    cert: Path
    key: Path

    def pem(self) -> bytes:
        return self.cert.read_bytes()


@dataclass(frozen=True)
class Authority:
    folder: Path
    ca: Issued
    key: Any  # the CA's private key

    def issue(self, name: str, *, server: bool, ips: tuple[str, ...] = (), dns: tuple[str, ...] = ()) -> Issued:
        return _issue(self, name, server=server, ips=ips, dns=dns)


def _new_key() -> Any:
    from cryptography.hazmat.primitives.asymmetric import ec

    return ec.generate_private_key(ec.SECP256R1())


def _write(folder: Path, stem: str, cert: Any, key: Any) -> Issued:
    from cryptography.hazmat.primitives import serialization

    cert_path, key_path = folder / f"{stem}.crt", folder / f"{stem}.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return Issued(cert_path, key_path)


def _name(common_name: str) -> Any:
    from cryptography import x509
    from cryptography.x509.oid import NameOID

    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _builder(subject: str, issuer: Any, public_key: Any) -> Any:
    from cryptography import x509

    now = datetime.datetime.now(datetime.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(_name(subject))
        .issuer_name(issuer)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
    )


def new_authority(folder: Path, name: str) -> Authority:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes

    key = _new_key()
    cert = (
        _builder(name, _name(name), key.public_key())
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True
        )  # keyCertSign, cRLSign
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return Authority(folder, _write(folder, name.replace(" ", "-"), cert, key), key)


def _issue(ca: Authority, name: str, *, server: bool, ips: tuple[str, ...], dns: tuple[str, ...]) -> Issued:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.x509.oid import ExtendedKeyUsageOID

    key = _new_key()
    ca_cert = x509.load_pem_x509_certificate(ca.ca.pem())
    usage = ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH
    names = [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ips] + [x509.DNSName(d) for d in dns]
    builder = (
        _builder(name, ca_cert.subject, key.public_key())
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca.key.public_key()), critical=False)
    )
    if names:
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    cert = builder.sign(ca.key, hashes.SHA256())
    stem = f"{ca.ca.cert.stem}-{'server' if server else 'client'}-{name}"  # one file per CA and name
    return _write(ca.folder, stem, cert, key)


@dataclass(frozen=True)
class Pki:
    authority: Authority
    server: Issued  # 127.0.0.1, ::1, localhost
    named_server: Issued  # SERVER_NAME only
    stranger: Authority  # a CA nobody trusts

    @property
    def ca_pem(self) -> bytes:
        return self.authority.ca.pem()

    def client(self, user: str) -> Issued:
        """A client certificate for ``user`` (its CN), issued by the session's CA."""
        return _client(self, user)

    def server_context(self, *, named: bool = False, stranger: bool = False) -> ssl.SSLContext:
        """The server side: the session CA's certificate (``named``: for SERVER_NAME only; ``stranger``: one
        from the untrusted CA), asking for an optional client certificate from the session's CA."""
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        issued = _stranger_server(self) if stranger else self.named_server if named else self.server
        context.load_cert_chain(issued.cert, issued.key)
        context.load_verify_locations(cafile=self.authority.ca.cert)
        context.verify_mode = ssl.CERT_OPTIONAL
        return context


@functools.cache
def _client(pki: Pki, user: str) -> Issued:
    return pki.authority.issue(user, server=False)


@functools.cache
def _stranger_server(pki: Pki) -> Issued:
    return pki.stranger.issue("127.0.0.1", server=True, ips=("127.0.0.1",), dns=("localhost",))


@functools.cache
def session_pki() -> Pki:
    """The test session's CA and certificates (made on first use, removed at exit)."""
    folder = Path(tempfile.mkdtemp(prefix="pwdeploy-test-ca-"))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    authority = new_authority(folder, "pwdeploy test CA")
    return Pki(
        authority,
        authority.issue("127.0.0.1", server=True, ips=("127.0.0.1", "::1"), dns=("localhost",)),
        authority.issue(SERVER_NAME, server=True, dns=(SERVER_NAME,)),
        new_authority(folder, "untrusted CA"),
    )
