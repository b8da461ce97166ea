"""Credential plugins (a kubeconfig user's ``exec``: gke-gcloud-auth-plugin, kubelogin, aws eks get-token, ...),
run by pwdeploy itself so that a plugin that cannot give credentials stops the command before any request is sent.

The protocol is Kubernetes' (https://kubernetes.io/docs/reference/access-authn-authz/authentication/#client-go-
credential-plugins): the plugin gets ``KUBERNETES_EXEC_INFO`` (an ExecCredential with ``spec.interactive: false``,
and ``spec.cluster`` when ``provideClusterInfo`` is set) and prints an ExecCredential of the same apiVersion whose
``status`` holds a ``token`` or a ``clientCertificateData``/``clientKeyData`` pair, and may hold an
``expirationTimestamp``; a token is fetched again when it is about to expire (``PluginToken.refresh``).

What can go wrong, and the exit code (pwdeploy.errors):
- the exec entry is malformed, or its command is not on PATH or cannot be started: ``ConfigError``, exit 2 (the
  kubeconfig or the machine needs fixing; the message carries the kubeconfig's ``installHint``);
- the plugin ran and failed (non-zero exit), printed something that is not an ExecCredential, or did not answer
  within ``timeout`` seconds (60 by default; a notice is given after ``notice_after``): ``ClusterError``, exit 4,
  like a credential the API server rejects. Its stderr is quoted printable, bounded and with secrets masked
  (``pwdeploy.text.masked``, the one masker).

Running the plugin's process (bounded in time and output) is pwdeploy.kube.plugin_run's.
"""

from __future__ import annotations

import base64
import json
import threading
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from pwdeploy.errors import ClusterError, ConfigError
from pwdeploy.text import masked

if TYPE_CHECKING:
    pass

REFRESH_BEFORE = timedelta(seconds=10)  # a token this close to its expiry is fetched again before a request
API_VERSIONS = ("client.authentication.k8s.io/v1", "client.authentication.k8s.io/v1beta1")
GKE_PLUGIN = "gke-gcloud-auth-plugin"
GKE_LOGIN = (
    "log in to Google Cloud (gcloud auth login, and gcloud auth application-default login), then fetch the "
    "cluster's credentials again: gcloud container clusters get-credentials CLUSTER --location LOCATION"
)
GKE_INSTALL = (
    "install it: gcloud components install gke-gcloud-auth-plugin (apt: google-cloud-cli-gke-gcloud-auth-plugin)"
)


class Plugin(NamedTuple):
    """A user's exec entry, checked: what to run, and what to say when it fails."""

    command: str
    args: tuple[str, ...]
    env: dict[str, str]
    api_version: str
    install_hint: str
    cluster_info: dict[str, Any] | None
    whose: str  # "user 'u' (context 'c')"

    @property
    def name(self) -> str:
        return Path(self.command).name

    def hint(self, missing: bool = False) -> str:
        """How to get working credentials: the installHint, and for GKE's plugin the gcloud commands."""
        parts = [self.install_hint.strip()] if self.install_hint.strip() else []
        if self.name == GKE_PLUGIN:
            parts.append(GKE_INSTALL if missing else GKE_LOGIN)
        elif not missing:
            parts.append(f"run the plugin yourself to see what it needs: {masked(' '.join(self.argv))}")
        return "; ".join(parts) or f"install {self.name}, or fix the user's exec entry in the kubeconfig"

    @property
    def argv(self) -> tuple[str, ...]:
        return (self.command, *self.args)


class Credential(NamedTuple):
    token: str | None
    certificate: str | None  # PEM
    key: str | None  # PEM
    expires: datetime | None


def plugin_of(user: dict[str, Any], whose: str, cluster: dict[str, Any]) -> Plugin | None:
    """The user's credential plugin, or None when it has none; a malformed exec entry is a ``ConfigError``."""
    entry = user.get("exec")
    if entry is None:
        return None
    bad = _malformed(entry)
    if bad is not None:
        raise ConfigError(None, f"{whose}: the exec entry (credential plugin) {bad}", hint="fix it in the kubeconfig")
    env = {str(item["name"]): str(item["value"]) for item in entry.get("env") or []}
    info = _cluster_info(cluster) if entry.get("provideClusterInfo") else None
    return Plugin(
        entry["command"],
        tuple(str(a) for a in entry.get("args") or []),
        env,
        entry["apiVersion"],
        str(entry.get("installHint") or ""),
        info,
        whose,
    )


def _malformed(entry: Any) -> str | None:
    if not isinstance(entry, dict):
        return "is not a mapping"
    if not isinstance(entry.get("command"), str) or not entry["command"]:
        return "has no command"
    if entry.get("apiVersion") not in API_VERSIONS:
        return f"has apiVersion {entry.get('apiVersion')!r}; pwdeploy speaks {' and '.join(API_VERSIONS)}"
    if not isinstance(entry.get("args") or [], list):
        return "has args that are not a list"
    env = entry.get("env") or []
    if not isinstance(env, list) or not all(isinstance(e, dict) and "name" in e and "value" in e for e in env):
        return "has env that is not a list of {name, value}"
    for index, item in enumerate(env):  # what exec(2) cannot pass: a name holding "=", a NUL anywhere
        name, value = item["name"], item["value"]
        if not isinstance(name, str) or not name or "=" in name or "\0" in name:
            return f"has env[{index}].name that is not a variable name (empty, or holding '=' or a NUL)"
        if not isinstance(value, str) or "\0" in value:
            return f"has env[{index}].value ({name}) that is not a string without NUL"
    if entry.get("interactiveMode") == "Always":
        return "asks for interactiveMode: Always, and pwdeploy runs plugins without a terminal"
    return None


def _cluster_info(cluster: dict[str, Any]) -> dict[str, Any]:
    keys = ("server", "tls-server-name", "insecure-skip-tls-verify", "certificate-authority-data", "proxy-url")
    info = {key: cluster[key] for key in keys if key in cluster}
    return {**info, **_extension_config(cluster)}


def _extension_config(cluster: dict[str, Any]) -> dict[str, Any]:
    for extension in cluster.get("extensions") or []:
        if isinstance(extension, dict) and extension.get("name") == "client.authentication.k8s.io/exec":
            return {"config": extension.get("extension")}
    return {}


def read_credential(plugin: Plugin, out: bytes) -> Credential:
    """The ExecCredential's status; anything else is a ``ClusterError`` naming what was wrong (never its text)."""
    deep = False
    try:
        data = json.loads(out)
    except ValueError:
        data = None
    except RecursionError:  # nested deeper than Python's parser goes (about 1,000 levels)
        data, deep = None, True
    status = data.get("status") if isinstance(data, dict) else None
    if not isinstance(data, dict):
        problem = "printed no JSON" if out.strip() else "printed nothing"
        problem = "printed JSON nested deeper than any ExecCredential" if deep else problem
    elif data.get("kind") != "ExecCredential" or data.get("apiVersion") != plugin.api_version:
        found = f"a {data.get('kind')!r} of {data.get('apiVersion')!r}"
        problem = f"printed {found}, not an ExecCredential of {plugin.api_version}"
    elif not isinstance(status, dict) or not _usable(status):
        problem = "printed an ExecCredential without status.token or status.clientCertificateData and clientKeyData"
    else:
        return Credential(
            _text(status.get("token")),
            _text(status.get("clientCertificateData")),
            _text(status.get("clientKeyData")),
            _expiry(plugin, status.get("expirationTimestamp")),
        )
    raise ClusterError(
        f"the credential plugin {plugin.name} of {plugin.whose} {problem}; no request was sent", hint=plugin.hint()
    )


def _usable(status: dict[str, Any]) -> bool:
    token = status.get("token")
    if isinstance(token, str) and token.strip():
        return True
    return all(isinstance(status.get(k), str) and status[k] for k in ("clientCertificateData", "clientKeyData"))


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _expiry(plugin: Plugin, value: Any) -> datetime | None:
    if value is None:
        return None
    try:
        parsed = datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError:
        parsed = None
    if parsed is None or parsed.tzinfo is None:
        raise ClusterError(
            f"the credential plugin {plugin.name} of {plugin.whose} printed an expirationTimestamp that is not an "
            "RFC 3339 time; no request was sent",
            hint=plugin.hint(),
        )
    return parsed


def client_certificate(credential: Credential) -> dict[str, str]:
    """A plugin's client certificate as the kubeconfig fields the client reads (base64 of the PEM)."""
    if credential.token is not None or credential.certificate is None or credential.key is None:
        return {}
    return {
        "client-certificate-data": base64.b64encode(credential.certificate.encode()).decode(),
        "client-key-data": base64.b64encode(credential.key.encode()).decode(),
    }


class PluginToken:
    """A plugin's bearer token for the client's configuration, fetched again before each request once it is
    within ``REFRESH_BEFORE`` of its expiry (threads share one fetch)."""

    def __init__(self, credential: Credential, fetch: Callable[[], Credential], utc_now: Callable[[], datetime]):
        self._credential = credential
        self._fetch = fetch
        self._utc_now = utc_now
        self._lock = threading.Lock()
        self.fetches = 1

    def apply(self, configuration: Any) -> None:
        """Set the token, and a refresh hook the client calls before every request."""
        configuration.api_key["BearerToken"] = f"Bearer {self._credential.token}"
        configuration.refresh_api_key_hook = self.refresh

    def refresh(self, configuration: Any) -> None:
        with self._lock:
            expires = self._credential.expires
            if expires is not None and self._utc_now() >= expires - REFRESH_BEFORE:
                self._credential = self._fetch()
                self.fetches += 1
            configuration.api_key["BearerToken"] = f"Bearer {self._credential.token}"
