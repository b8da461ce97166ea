"""Registry credentials, found where docker finds them, and Google's for Google's registries.

In order: a credential helper named for the registry (``credHelpers``), a stored ``auths`` entry (base64
``user:password``), the default store (``credsStore``), then, for ``*.pkg.dev`` and ``gcr.io``, an access token
of the Application Default Credentials as user ``oauth2accesstoken``. Nothing found: anonymous, which public
repositories allow. Lookups happen only when a registry asks for credentials.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import shutil
import subprocess
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from pwdeploy.imageref import DOCKER_HUB, DOCKER_HUB_API

HELPER_TIMEOUT = 10.0  # seconds; a helper may ask a keychain or gcloud
DOCKER_HUB_KEY = "https://index.docker.io/v1/"  # the key docker stores Hub credentials under
DOCKER_HUB_HOSTS = frozenset({DOCKER_HUB, DOCKER_HUB_API, "index.docker.io", "auth.docker.io"})
GOOGLE_USER = "oauth2accesstoken"
GOOGLE_SCOPE = "https://www.googleapis.com/auth/cloud-platform"


@dataclass(frozen=True)
class Basic:
    username: str
    password: str
    source: str  # where it came from, for messages: "docker config", "docker-credential-gcloud", ...


TokenSource = Callable[[], str | None]  # an OAuth2 access token, or None when there are no credentials


CredentialLookup = Callable[[str], Basic | None]  # registry host -> credentials, asked only when challenged


def is_google_registry(host: str) -> bool:
    return host.endswith(".pkg.dev") or host == "gcr.io" or host.endswith(".gcr.io")


def default_config_dir() -> Path:
    """Where docker reads config.json: $DOCKER_CONFIG, else ~/.docker."""
    return Path(os.environ.get("DOCKER_CONFIG") or Path.home() / ".docker")


class Credentials:
    """Credentials per registry host. Thread-safe: the image checks look up several registries at once."""

    def __init__(
        self,
        config_dir: Path | None = None,
        *,
        helper_path: str | None = None,
        google_token: TokenSource | None = None,
    ) -> None:
        """``helper_path``: where to find ``docker-credential-*`` (PATH when None); ``google_token``: the ADC seam."""
        self._config = _read_config((config_dir or default_config_dir()) / "config.json")
        self._helper_path = helper_path
        self._google_token = google_token or AdcToken()

    def for_registry(self, host: str) -> Basic | None:
        keys = _keys(host)
        helpers: Mapping[str, Any] = self._config.get("credHelpers") or {}
        for key in keys:
            if key in helpers:
                return self._from_helper(str(helpers[key]), key)
        stored = self._from_auths(keys)
        if stored is not None:
            return stored
        if self._config.get("credsStore"):
            found = self._from_helper(str(self._config["credsStore"]), keys[0])
            if found is not None:
                return found
        if is_google_registry(host):
            token = self._google_token()
            if token:
                return Basic(GOOGLE_USER, token, "Application Default Credentials")
        return None

    def _from_auths(self, keys: tuple[str, ...]) -> Basic | None:
        auths: Mapping[str, Any] = self._config.get("auths") or {}
        by_host = {_host_of(key): value for key, value in auths.items() if isinstance(value, dict)}
        for key in keys:
            entry = by_host.get(_host_of(key))
            if entry is None:
                continue
            if entry.get("auth"):
                try:
                    user, _, password = base64.b64decode(entry["auth"]).decode().partition(":")
                except (binascii.Error, UnicodeDecodeError, ValueError):
                    continue
                return Basic(user, password, "docker config")
            if entry.get("username") and entry.get("password"):
                return Basic(str(entry["username"]), str(entry["password"]), "docker config")
        return None

    def _from_helper(self, name: str, server: str) -> Basic | None:
        """``docker-credential-<name> get`` with the server on stdin; None when it has nothing or fails."""
        program = shutil.which(f"docker-credential-{name}", path=self._helper_path)
        if program is None:
            return None
        try:
            done = subprocess.run(
                [program, "get"], input=server, capture_output=True, text=True, timeout=HELPER_TIMEOUT, check=False
            )
            answer = json.loads(done.stdout) if done.returncode == 0 else None
        except (OSError, subprocess.TimeoutExpired, json.JSONDecodeError):
            return None
        if not isinstance(answer, dict) or not answer.get("Secret"):
            return None
        return Basic(str(answer.get("Username") or ""), str(answer["Secret"]), f"docker-credential-{name}")


class AdcToken:
    """An access token of the Application Default Credentials, asked for once however many threads want it."""

    def __init__(self, lookup: TokenSource | None = None) -> None:
        self._lookup = lookup or _adc_access_token
        self._lock = threading.Lock()
        self._asked = False
        self._token: str | None = None

    def __call__(self) -> str | None:
        with self._lock:
            if not self._asked:
                self._asked = True
                self._token = self._lookup()
            return self._token


def _adc_access_token() -> str | None:
    import google.auth
    from google.auth import exceptions
    from google.auth.transport.requests import Request

    try:
        credentials, _ = google.auth.default(scopes=[GOOGLE_SCOPE])
        credentials.refresh(Request())  # type: ignore[no-untyped-call]
    except exceptions.GoogleAuthError:
        return None
    token = getattr(credentials, "token", None)
    return str(token) if token else None


def registry_hosts(registry: str) -> frozenset[str]:
    """The host names (no port) that are one registry's own, which its credentials may go to: the registry's host;
    for Docker Hub also its API, index and token service hosts (the token realm of registry-1.docker.io is
    https://auth.docker.io/token: https://docs.docker.com/reference/api/registry/auth/)."""
    if registry in DOCKER_HUB_HOSTS:
        return DOCKER_HUB_HOSTS
    return frozenset({urlsplit(f"//{registry}").hostname or registry})


def _keys(host: str) -> tuple[str, ...]:
    """The names docker may have stored a registry's credentials under, most specific first."""
    if host in DOCKER_HUB_HOSTS:
        return (DOCKER_HUB_KEY, "index.docker.io", DOCKER_HUB, DOCKER_HUB_API)
    return (host, f"https://{host}", f"http://{host}")


def _host_of(key: str) -> str:
    """``https://host/v1/`` and ``host`` name the same registry in config.json."""
    return key.split("://", 1)[-1].split("/", 1)[0]


def _read_config(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError, RecursionError):
        return {}
    return data if isinstance(data, dict) else {}
