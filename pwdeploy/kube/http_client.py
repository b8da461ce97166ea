"""The HTTP client under the seam: urllib3, configured from one resolved kubeconfig context (or the in-cluster
service account), with nothing else imported. The seam speaks REST with plain dicts, so the official client's
generated models and APIs (about 0.35 s to import, more than ``pwdeploy render`` takes in all) are not needed.

What a kubeconfig entry means is kubectl's (client-go tools/clientcmd): the cluster's ``server``,
``certificate-authority(-data)``, ``insecure-skip-tls-verify``, ``tls-server-name`` and ``proxy-url``; the user's
``token`` or ``tokenFile``, ``client-certificate(-data)`` and ``client-key(-data)``, or ``username`` and
``password`` (Basic). ``exec`` plugins are run before (pwdeploy.kube.credential_plugin), and their token or
certificate handed in here. ``auth-provider`` entries (gcp, azure: removed from kubectl in 1.26; oidc) are refused
with the exec plugin that replaces them. Certificate and key data are written to private temporary files (0600,
removed at exit), since Python's ``ssl`` loads a client certificate only from a file.

``Configuration`` keeps the attribute names the rest of the seam and the tests read (``host``, ``api_key``,
``ssl_ca_cert``, ``cert_file``, ``proxy``, ...); ``ApiClient.request`` sends one request and returns the urllib3
response unread; an error status is a ``HttpFailure`` raised by the caller (``Kube``) once the body is read.
"""

from __future__ import annotations

import atexit
import base64
import ipaddress
import json
import os
import ssl
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode, urlsplit

from pwdeploy.errors import ConfigError

SERVICE_ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")
TOKEN_REREAD_S = 60.0  # a projected service-account token is rotated on disk; read it again this often
AUTH_PROVIDER_HINT = (
    "replace the user's auth-provider with an exec credential plugin (GKE: gke-gcloud-auth-plugin, written by "
    "gcloud container clusters get-credentials CLUSTER --location LOCATION; OIDC: kubelogin)"
)


def user_agent() -> str:
    """``pwdeploy/0.2.0 (linux/amd64) python/3.12.3``: client-go's form (``kubectl/v1.35.0 (linux/amd64)
    kubernetes/COMMIT``, rest.DefaultKubernetesUserAgent), so that a cluster's admin sees which requests are
    pwdeploy's, of which version, in the API server's audit log (its ``userAgent``) and request logs."""
    import sys

    from pwdeploy import __version__

    system, machine = os.uname().sysname.lower(), os.uname().machine
    arch = {"x86_64": "amd64", "aarch64": "arm64"}.get(machine, machine)
    python = ".".join(str(part) for part in sys.version_info[:3])
    return f"pwdeploy/{__version__} ({system}/{arch}) python/{python}"


USER_AGENT = user_agent()


class HttpFailure(Exception):
    """An answer with an error status: ``status``, ``reason``, the ``body`` (text) and the ``headers``."""

    def __init__(
        self, status: int | None = None, reason: str = "", body: str | None = None, headers: Any = None
    ) -> None:
        super().__init__(f"({status}) {reason}")
        self.status, self.reason, self.body, self.headers = status, reason, body, headers


class Configuration:
    """Where the API server is and how to authenticate and verify it."""

    def __init__(self) -> None:
        self.host = "http://localhost"
        self.api_key: dict[str, str] = {}  # "BearerToken": "Bearer ..." (or "Basic ...")
        self.refresh_api_key_hook: Callable[[Configuration], None] | None = None
        self.verify_ssl = True
        self.ssl_ca_cert: str | None = None
        self.ca_cert_data: str | None = None
        self.cert_file: str | None = None
        self.key_file: str | None = None
        self.assert_hostname: bool | None = None
        self.tls_server_name: str | None = None
        self.proxy: str | None = None
        self.proxy_headers: dict[str, str] | None = None
        self.no_proxy: str | None = None
        self.connection_pool_maxsize = 16

    def authorization(self) -> str | None:
        """The Authorization header's value, after the refresh hook (a plugin's token fetched again) ran."""
        if self.refresh_api_key_hook is not None:
            self.refresh_api_key_hook(self)
        return self.api_key.get("BearerToken") or None


class ApiClient:
    """Requests to one API server over one urllib3 pool (thread-safe), made on first use."""

    def __init__(self, configuration: Configuration) -> None:
        self.configuration = configuration
        self._pool: Any = None
        self._lock = threading.Lock()

    def url(self, path: str, query: Sequence[tuple[str, str]] = ()) -> str:
        encoded = f"?{urlencode(list(query), quote_via=quote)}" if query else ""
        return f"{self.configuration.host.rstrip('/')}{path}{encoded}"

    def headers(self, extra: Mapping[str, str]) -> dict[str, str]:
        """``extra``, the User-Agent and the Authorization header."""
        auth = self.configuration.authorization()
        return {"User-Agent": USER_AGENT, **extra, **({"authorization": auth} if auth else {})}

    def request(
        self,
        method: str,
        url: str,
        headers: Any,
        body: Any,
        timeout: tuple[float, float | None],
        total: float | None = None,
    ) -> Any:
        """Send; the urllib3 response, unread (``preload_content=False``). ``timeout``: (connect, read) seconds;
        ``total``: connecting and the answer's head together. No retries here: ``Kube`` owns them."""
        import urllib3

        data = None if body is None else body if isinstance(body, (bytes, str)) else json.dumps(body)
        return self._manager().request(
            method,
            url,
            body=data,
            headers=headers,
            timeout=urllib3.Timeout(connect=timeout[0], read=timeout[1], total=total),
            preload_content=False,
            retries=False,
            redirect=False,
        )

    def _manager(self) -> Any:
        with self._lock:
            if self._pool is None:
                self._pool = pool_manager(self.configuration)
            return self._pool


def pool_manager(conf: Configuration) -> Any:
    """The urllib3 pool manager for ``conf``: TLS as configured, through its proxy unless ``no_proxy`` names the
    server."""
    import urllib3

    args: dict[str, Any] = {
        "cert_reqs": ssl.CERT_REQUIRED if conf.verify_ssl else ssl.CERT_NONE,
        "ca_certs": conf.ssl_ca_cert,
        "ca_cert_data": conf.ca_cert_data,
        "cert_file": conf.cert_file,
        "key_file": conf.key_file,
        "maxsize": conf.connection_pool_maxsize,
    }
    if conf.assert_hostname is not None:
        args["assert_hostname"] = conf.assert_hostname
    if conf.tls_server_name:
        args["server_hostname"] = conf.tls_server_name
    if not conf.proxy or bypasses_proxy(conf.host, conf.no_proxy or ""):
        return urllib3.PoolManager(**args)
    if urlsplit(conf.proxy).scheme.startswith("socks"):
        from urllib3.contrib.socks import SOCKSProxyManager

        return SOCKSProxyManager(conf.proxy, headers=conf.proxy_headers, **args)
    return urllib3.ProxyManager(conf.proxy, proxy_headers=conf.proxy_headers, **args)


def bypasses_proxy(url: str, no_proxy: str) -> bool:
    """Whether ``no_proxy`` (comma-separated: ``*``, names and their subdomains, ``host:port``, IPs and CIDRs)
    names ``url``'s host."""
    parts = urlsplit(url)
    host, netloc = (parts.hostname or "").lower(), parts.netloc.lower().rsplit("@", 1)[-1]
    if not host:
        return True
    try:
        address: ipaddress.IPv4Address | ipaddress.IPv6Address | None = ipaddress.ip_address(host)
    except ValueError:
        address = None
    for entry in (e.strip().lower() for e in no_proxy.split(",")):
        if not entry:
            continue
        if entry == "*":
            return True
        if address is not None:
            try:
                if address in ipaddress.ip_network(entry, strict=False):
                    return True
            except ValueError:
                pass
        entry = entry.lstrip(".")
        if entry in (host, netloc) or host.endswith("." + entry) or netloc.endswith("." + entry):
            return True
    return False


# ---------------------------------------------------------------------------------------------- kubeconfig


def configure(configuration: Configuration, cluster: Mapping[str, Any], user: Mapping[str, Any], where: str) -> None:
    """Fill ``configuration`` from a resolved cluster and user entry (paths already absolute); an entry of the
    wrong type or a file that cannot be read is a ``ConfigError`` naming ``where``."""
    server = _text(cluster, "server", where)
    configuration.host = server.rstrip("/")
    if "auth-provider" in user:
        provider = user["auth-provider"]
        name = provider.get("name") if isinstance(provider, dict) else None
        raise ConfigError(None, f"{where}: auth-provider {name!r} is not supported", hint=AUTH_PROVIDER_HINT)
    token = _token(user, where)
    if token:
        configuration.api_key["BearerToken"] = f"Bearer {token}"
    elif user.get("username") is not None and user.get("password") is not None:
        pair = f"{_text(user, 'username', where)}:{_text(user, 'password', where)}"
        configuration.api_key["BearerToken"] = "Basic " + base64.b64encode(pair.encode()).decode()
    if "insecure-skip-tls-verify" in cluster:
        configuration.verify_ssl = cluster["insecure-skip-tls-verify"] is not True
    if cluster.get("tls-server-name"):
        configuration.tls_server_name = _text(cluster, "tls-server-name", where)
    if cluster.get("proxy-url"):
        configuration.proxy = _text(cluster, "proxy-url", where)
    if not server.startswith("https"):
        return
    configuration.ca_cert_data = _pem(cluster, "certificate-authority", where)
    if configuration.ca_cert_data is None:
        configuration.ssl_ca_cert = _file(cluster, "certificate-authority", where)
    if configuration.cert_file is None:  # a plugin's certificate comes first
        configuration.cert_file = _file(user, "client-certificate", where)
        configuration.key_file = _file(user, "client-key", where)


def _token(user: Mapping[str, Any], where: str) -> str | None:
    if user.get("token"):
        return _text(user, "token", where)
    if user.get("tokenFile"):
        path = _text(user, "tokenFile", where)
        try:
            return Path(path).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(None, f"{where}: cannot read its tokenFile {path}: {_why(exc)}") from None
    return None


class FileToken:
    """A kubeconfig user's ``tokenFile``, read again as kubectl reads it (client-go transport
    NewCachedFileTokenSource): a token is kept for a minute less a 10 s leeway, then the file is read again before
    the next request, so a projected token the kubelet rotates (at 80 % of its life, 10 minutes by default) is
    picked up by a long follow. A read that fails, or finds the file empty, keeps the token read before, as
    client-go does ("Unable to rotate token")."""

    KEPT_S = 60.0 - 10.0

    def __init__(self, path: Path, token: str, now: Callable[[], float]) -> None:
        self.path, self.token, self._now = path, token, now
        self._read_at = now()
        self._lock = threading.Lock()
        self.reads = 1

    def apply(self, configuration: Configuration) -> None:
        configuration.api_key["BearerToken"] = f"Bearer {self.token}"
        configuration.refresh_api_key_hook = self.refresh

    def refresh(self, configuration: Configuration) -> None:
        with self._lock:
            if self._now() - self._read_at >= self.KEPT_S:
                self._read_at = self._now()
                self.reads += 1
                try:
                    token = self.path.read_text(encoding="utf-8").strip()
                except (OSError, UnicodeDecodeError):
                    token = ""
                self.token = token or self.token
            configuration.api_key["BearerToken"] = f"Bearer {self.token}"


def file_token(user: Mapping[str, Any], configuration: Configuration, now: Callable[[], float]) -> FileToken | None:
    """The user's token file, to be read again (None: the user has a ``token``, which kubectl prefers, or no
    file), from the token ``configure`` read from it (a file that cannot be read is its ConfigError)."""
    if user.get("token") or not isinstance(user.get("tokenFile"), str) or not user.get("tokenFile"):
        return None
    first = configuration.api_key.get("BearerToken", "").removeprefix("Bearer ").strip()
    return FileToken(Path(user["tokenFile"]), first, now)


def _pem(entry: Mapping[str, Any], key: str, where: str) -> str | None:
    """``key-data`` as PEM text, which ssl loads as it is (``cadata``): no file to write for the CA every GKE
    kubeconfig carries. None without it, or when it is not PEM (a file is written then)."""
    data = _data(entry, key, where)
    return data.decode("ascii") if data and data.isascii() and b"-----BEGIN CERTIFICATE-----" in data else None


def _file(entry: Mapping[str, Any], key: str, where: str) -> str | None:
    """The path of ``key``'s file, or of a private file holding ``key-data``."""
    data = _data(entry, key, where)
    if data is not None:
        return private_file(data)
    if entry.get(key):
        path = _text(entry, key, where)
        if not Path(path).is_file():
            raise ConfigError(None, f"{where}: its {key} {path} does not exist or is not a file")
        return path
    return None


def _data(entry: Mapping[str, Any], key: str, where: str) -> bytes | None:
    """``key-data`` (base64 in a kubeconfig), decoded; None without it."""
    if not entry.get(f"{key}-data"):
        return None
    try:
        return base64.b64decode(_text(entry, f"{key}-data", where), validate=False)
    except ValueError:
        raise ConfigError(None, f"{where}: its {key}-data is not base64") from None


def _text(entry: Mapping[str, Any], key: str, where: str) -> str:
    value = entry.get(key)
    if not isinstance(value, str):
        raise ConfigError(None, f"{where}: {key} is not a string")
    return value


def _why(exc: Exception) -> str:
    return exc.strerror if isinstance(exc, OSError) and exc.strerror else type(exc).__name__


_private_dir: str | None = None
_private_lock = threading.Lock()


def private_file(data: bytes) -> str:
    """A file only this user can read, holding ``data``; the folder goes when the process ends."""
    global _private_dir
    import shutil
    import tempfile  # here: only a client certificate or key in the kubeconfig's data needs a file

    with _private_lock:
        if _private_dir is None:
            _private_dir = tempfile.mkdtemp(prefix="pwdeploy-kube-")
            atexit.register(shutil.rmtree, _private_dir, ignore_errors=True)
        handle, path = tempfile.mkstemp(dir=_private_dir)
    with os.fdopen(handle, "wb") as out:
        out.write(data)
    return path


# ---------------------------------------------------------------------------------------------- in a pod


def configure_in_cluster(configuration: Configuration, folder: Path = SERVICE_ACCOUNT) -> None:
    """The pod's service account (kubectl's rest.InClusterConfig): the server from KUBERNETES_SERVICE_HOST and
    _PORT, the token and CA from ``folder``; the token is read again every minute (it is rotated on disk)."""
    host, port = os.environ.get("KUBERNETES_SERVICE_HOST", ""), os.environ.get("KUBERNETES_SERVICE_PORT", "")
    if not host or not port:
        raise InClusterUnavailable("KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT must both be set")
    token_file, ca_file = folder / "token", folder / "ca.crt"
    if not token_file.is_file() or not ca_file.is_file():
        raise InClusterUnavailable(f"{token_file} and {ca_file} must both exist")
    configuration.host = f"https://[{host}]:{port}" if ":" in host else f"https://{host}:{port}"
    configuration.ssl_ca_cert = str(ca_file)
    read_at = [0.0]

    def reread(conf: Configuration) -> None:
        if time.monotonic() - read_at[0] < TOKEN_REREAD_S:
            return
        try:
            token = token_file.read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError) as exc:
            raise InClusterUnavailable(f"cannot read {token_file}: {_why(exc)}") from None
        conf.api_key["BearerToken"] = f"Bearer {token}"
        read_at[0] = time.monotonic()

    reread(configuration)
    configuration.refresh_api_key_hook = reread


class InClusterUnavailable(Exception):
    """This is not a pod with a usable service account."""
