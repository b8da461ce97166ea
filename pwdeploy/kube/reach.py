"""How pwdeploy reaches the API server: as kubectl (client-go) decides it, whatever the client library's version.

- A cluster's ``proxy-url`` is used for every request, whatever ``NO_PROXY`` says (client-go sets it as the
  transport's proxy, and the environment is not consulted). Schemes: http, https, socks5, socks5h; SOCKS needs
  PySocks (urllib3's ``socks`` extra).
- Without one, ``HTTPS_PROXY`` (``HTTP_PROXY`` for an http server) applies unless ``NO_PROXY`` names the host (a
  name and its subdomains, an IP, a CIDR, ``*``), and never to a loopback server (``localhost``, 127.0.0.0/8,
  ``::1``): Go's ProxyFromEnvironment never proxies those.
- ``insecure-skip-tls-verify: true`` together with a CA is refused, with kubectl's own message.
- A CA bundle's blocks that are not certificates, or do not parse, are skipped, as kubectl skips them
  (``usable_ca``).
- An ``http://`` server is sent no credentials at all: clientcmd only adds a user's credentials when the transport
  is TLS (kubectl sends no token and runs no credential plugin for such a server), so neither does pwdeploy.
"""

from __future__ import annotations

import base64
import ipaddress
import os
import re
import ssl
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from pwdeploy.errors import ConfigError, DependencyError

PROXY_SCHEMES = ("http", "https", "socks5", "socks5h")
INSECURE_WITH_CA = "specifying a root certificates file with the insecure flag is not allowed"  # kubectl's words
CREDENTIAL_KEYS = (
    "token",
    "tokenFile",
    "username",
    "password",
    "client-certificate",
    "client-certificate-data",
    "client-key",
    "client-key-data",
    "exec",
    "auth-provider",
)


def check_tls(cluster: dict[str, Any], where: str) -> None:
    """Refuse a cluster that skips TLS verification and also names a CA, as kubectl does."""
    has_ca = bool(cluster.get("certificate-authority") or cluster.get("certificate-authority-data"))
    if cluster.get("insecure-skip-tls-verify") is True and has_ca:
        raise ConfigError(
            None,
            f"{where}: {INSECURE_WITH_CA} (insecure-skip-tls-verify: true with certificate-authority)",
            hint="drop insecure-skip-tls-verify from the cluster entry (the CA verifies the server)",
        )


def plain_http(server: str) -> bool:
    return urlsplit(server).scheme.lower() == "http"


def credentials_of(user: dict[str, Any]) -> list[str]:
    """The credential fields a user entry sets (empty: it sends nothing)."""
    return [key for key in CREDENTIAL_KEYS if user.get(key)]


def kubectl_proxy(server: str, proxy_url: Any, environ: Mapping[str, str] | None = None) -> str | None:
    """The proxy kubectl would use to reach ``server`` (None: a direct connection)."""
    if proxy_url is not None and proxy_url != "":
        return _checked_proxy(proxy_url, "the cluster's proxy-url")
    env = os.environ if environ is None else environ
    parts = urlsplit(server)
    if _loopback(parts.hostname or ""):
        return None
    names = ("HTTPS_PROXY", "https_proxy") if parts.scheme == "https" else ("HTTP_PROXY", "http_proxy")
    found = next((env[name] for name in names if env.get(name)), None)
    if found is None or _bypassed(parts.hostname or "", parts.port, _first(env, "NO_PROXY", "no_proxy")):
        return None
    if "://" not in found:
        found = f"http://{found}"  # Go reads a bare host:port as an http proxy
    return _checked_proxy(found, next(name for name in names if env.get(name)))


def _first(env: Mapping[str, str], *names: str) -> str:
    return next((env[name] for name in names if env.get(name)), "")


def _checked_proxy(url: Any, what: str) -> str:
    from pwdeploy.kube.answers import without_userinfo

    text = str(url)
    scheme = urlsplit(text).scheme.lower()
    if not isinstance(url, str) or scheme not in PROXY_SCHEMES or not urlsplit(text).hostname:
        raise ConfigError(
            None,
            f"{what} {without_userinfo(text)!r} is not a proxy URL pwdeploy can use",
            hint=f"a proxy URL is SCHEME://HOST:PORT with SCHEME one of {', '.join(PROXY_SCHEMES)}",
        )
    if scheme.startswith("socks"):
        import importlib.util

        if importlib.util.find_spec("socks") is None:
            raise DependencyError(
                f"{what} {without_userinfo(text)!r} is a SOCKS proxy, and PySocks is not installed",
                hint="pip install 'urllib3[socks]' (or: pip install PySocks) into pwdeploy's environment",
            )
    return text


def _loopback(host: str) -> bool:
    if host.lower() == "localhost" or host.lower().endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _bypassed(host: str, port: int | None, no_proxy: str) -> bool:
    """Whether ``NO_PROXY`` names ``host`` (Go's rules: ``*``, a name and its subdomains, an IP, a CIDR, with an
    optional port)."""
    host = host.lower().strip("[]")
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        ip = None
    for raw in no_proxy.split(","):
        entry = raw.strip().lower()
        if entry == "*":
            return True
        if not entry:
            continue
        if ip is not None:
            try:
                if ip in ipaddress.ip_network(entry, strict=False):
                    return True
                continue
            except ValueError:
                pass
        name, _, entry_port = entry.rpartition(":") if entry.count(":") == 1 else (entry, "", "")
        if entry_port and entry_port != str(port):
            continue
        name = name.lstrip(".")
        if host == name or host.endswith("." + name):
            return True
    return False


# ---------------------------------------------------------------------------------------------- CA bundles

_PEM_BLOCK = re.compile(rb"-----BEGIN ([A-Z0-9 ]{1,64})-----\r?\n.*?-----END \1-----", re.DOTALL)


def usable_ca(cluster: dict[str, Any], where: str) -> dict[str, Any]:
    """The cluster entry with its CA bundle as kubectl trusts it: every ``CERTIFICATE`` block that parses, the
    rest skipped (client-go transport/transport.go rootCertPool uses Go's ``CertPool.AppendCertsFromPEM``, which
    skips a block that is not a certificate or does not parse). A ``certificate-authority`` file is read here and
    handed on as data. A bundle with no usable certificate at all is a ``ConfigError`` naming the entry."""
    data = cluster.get("certificate-authority-data")
    path = cluster.get("certificate-authority")
    if cluster.get("insecure-skip-tls-verify") is True or not (data or path):
        return cluster
    field = "certificate-authority-data" if data else "certificate-authority"
    try:
        pem = base64.b64decode(str(data), validate=False) if data else Path(str(path)).read_bytes()
    except (OSError, ValueError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else "not base64"
        raise ConfigError(None, f"{where}: cannot read its {field}: {reason}", hint=_CA_HINT) from None
    kept = [block for block in _PEM_BLOCK.finditer(pem) if block[1] == b"CERTIFICATE" and _loads(block[0])]
    if not kept:
        raise ConfigError(None, f"{where}: its {field} holds no certificate that can be read", hint=_CA_HINT)
    bundle = b"\n".join(block[0] for block in kept) + b"\n"
    rest = {k: v for k, v in cluster.items() if k not in ("certificate-authority", "certificate-authority-data")}
    return {**rest, "certificate-authority-data": base64.b64encode(bundle).decode()}


_CA_HINT = (
    "fetch the cluster's credentials again (GKE: gcloud container clusters get-credentials CLUSTER --location LOCATION)"
)


def _loads(block: bytes) -> bool:
    try:
        ssl.create_default_context(cadata=block.decode("ascii"))
    except (ssl.SSLError, ValueError, UnicodeDecodeError):
        return False
    return True
