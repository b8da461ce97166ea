"""Does an image exist? One manifest request to its registry (Docker Registry HTTP API v2, which Artifact Registry,
Docker Hub and the distribution registry all speak).

HEAD /v2/<repository>/manifests/<tag or digest> with the manifest types docker accepts (GET when HEAD is
refused). A 401 names how to authenticate: ``Bearer realm=...,service=...,scope=...`` (a token from the realm,
anonymous unless credentials are known) or ``Basic``. When a manifest is missing, the tag list tells a missing tag
from a missing repository. Every transport or HTTP problem becomes a ``Lookup``; callers never see an exception.

requests, not a registry library: the checks need one manifest request, the token flow and docker's credential
lookup; the Python registry clients looked at either go through a docker daemon (docker SDK) or leave out
credential helpers and Google's credentials, which are the part that needs care here.
"""

from __future__ import annotations

import base64
import hashlib
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import requests

from pwdeploy.imageref import ImageRef
from pwdeploy.preflight.credentials import Basic

# (connect, read) seconds per request: a preflight must not hang on a registry that does not answer.
TIMEOUT = (3.0, 10.0)
MANIFEST_TYPES = (
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
    "application/vnd.docker.distribution.manifest.v2+json",
)
ACCEPT = ", ".join(MANIFEST_TYPES)
USER_AGENT = "pwdeploy-preflight"
MESSAGE_CHARS = 200
CHALLENGE_PARAM = re.compile(r'(\w+)=(?:"([^"]*)"|([^,\s]*))')

# found; the tag or digest is not in the repository; the repository does not exist; the registry refused us;
# no answer; anything else.
LookupKind = Literal["found", "manifest_unknown", "name_unknown", "denied", "unreachable", "error"]
CredentialLookup = Callable[[str], Basic | None]  # registry host -> credentials, asked only when challenged


@dataclass(frozen=True)
class Lookup:
    kind: LookupKind
    detail: str  # the digest when found; otherwise what went wrong, in words
    tags: tuple[str, ...] = ()  # manifest_unknown: the tags the repository has (when it lists them)
    credentials: str | None = None  # where the credentials used came from; None: anonymous


class RegistryClient:
    """Manifest lookups; one session per lookup, so lookups can run in threads."""

    def __init__(self, credentials: CredentialLookup, *, timeout: tuple[float, float] = TIMEOUT) -> None:
        self._credentials = credentials
        self._timeout = timeout

    def lookup(self, ref: ImageRef) -> Lookup:
        with requests.Session() as session:
            session.headers["User-Agent"] = USER_AGENT
            conversation = _Conversation(session, ref, self._credentials, self._timeout)
            try:
                return conversation.lookup()
            except _TokenRefused as exc:
                return Lookup("denied", f"{ref.api_host}: {exc}", credentials=conversation.used)
            except requests.ConnectTimeout:
                return Lookup("unreachable", f"cannot connect to {ref.api_host} within {self._timeout[0]:g} s")
            except requests.Timeout:
                return Lookup("unreachable", f"{ref.api_host} did not answer within {self._timeout[1]:g} s")
            except requests.RequestException as exc:
                return Lookup("unreachable", f"cannot reach {ref.base_url()}: {_reason(exc)}")


class _Conversation:
    """The requests of one lookup, carrying the Authorization a challenge earned to the next request."""

    def __init__(
        self, session: requests.Session, ref: ImageRef, credentials: CredentialLookup, timeout: tuple[float, float]
    ) -> None:
        self.session, self.ref, self.timeout = session, ref, timeout
        self._credentials = credentials
        self._authorization: str | None = None
        self._challenged = False
        self.used: str | None = None  # the source of the credentials sent, if any

    def lookup(self) -> Lookup:
        headers = {"Accept": ACCEPT}
        response = self.request("HEAD", self.ref.manifest_url(), headers)
        if response.status_code in (400, 405, 501):  # HEAD refused: ask with GET
            response = self.request("GET", self.ref.manifest_url(), headers)
        if response.status_code == 200:
            digest = response.headers.get("Docker-Content-Digest")
            if not digest and response.request.method == "HEAD":
                response = self.request("GET", self.ref.manifest_url(), headers)
                digest = response.headers.get("Docker-Content-Digest")
            if not digest:
                digest = self.ref.digest or f"sha256:{hashlib.sha256(response.content).hexdigest()}"
            return Lookup("found", digest, credentials=self.used)
        if response.status_code == 404:
            return self._missing(response)
        return self._refused(response)

    def request(self, method: str, url: str, headers: dict[str, str]) -> requests.Response:
        """One request; on a first 401, answer the challenge and send it again."""
        response = self._send(method, url, headers)
        if response.status_code == 401 and not self._challenged:
            self._challenged = True
            if self._answer(response.headers.get("WWW-Authenticate", "")):
                response = self._send(method, url, headers)
        return response

    def _send(self, method: str, url: str, headers: dict[str, str]) -> requests.Response:
        sent = {**headers, **({"Authorization": self._authorization} if self._authorization else {})}
        return self.session.request(method, url, headers=sent, timeout=self.timeout, allow_redirects=True)

    def _answer(self, challenge: str) -> bool:
        """Earn an Authorization header for the challenge; False when there is nothing to answer it with."""
        scheme, _, params_text = challenge.strip().partition(" ")
        params = {
            m.group(1).lower(): m.group(2) if m.group(2) is not None else m.group(3)
            for m in CHALLENGE_PARAM.finditer(params_text)
        }
        basic = self._credentials(self.ref.registry)
        if scheme.lower() == "basic":
            if basic is None:
                return False
            self._authorization = _basic_header(basic)
            self.used = basic.source
            return True
        if scheme.lower() != "bearer" or not params.get("realm"):
            return False
        query = {"service": params.get("service")} if params.get("service") else {}
        query["scope"] = params.get("scope") or f"repository:{self.ref.repository}:pull"
        auth = (basic.username, basic.password) if basic is not None else None
        answer = self.session.get(params["realm"], params=query, auth=auth, timeout=self.timeout)
        if answer.status_code != 200:
            raise _TokenRefused(answer)
        body = _json(answer)
        token = body.get("token") or body.get("access_token")
        if not token:
            return False
        self._authorization = f"Bearer {token}"
        self.used = basic.source if basic is not None else None
        return True

    def _missing(self, response: requests.Response) -> Lookup:
        codes = _error_codes(response)
        if "NAME_UNKNOWN" in codes:
            return Lookup("name_unknown", f"repository {self.ref.name} does not exist", credentials=self.used)
        listing = self.request("GET", self.ref.tags_url(), {"Accept": "application/json"})
        if listing.status_code == 404:
            return Lookup("name_unknown", f"repository {self.ref.name} does not exist", credentials=self.used)
        tags = _json(listing).get("tags") if listing.status_code == 200 else None
        what = f"digest {self.ref.digest}" if self.ref.digest else f"tag {self.ref.manifest!r}"
        detail = f"{what} is not in {self.ref.name}"
        return Lookup("manifest_unknown", detail, tuple(str(t) for t in tags or ()), self.used)

    def _refused(self, response: requests.Response) -> Lookup:
        code = response.status_code
        said = _error_message(response)
        if code in (401, 403):
            who = f"with credentials from {self.used}" if self.used else "anonymously"
            return Lookup("denied", f"{self.ref.api_host} refused access {who} ({code}{said})", credentials=self.used)
        return Lookup("error", f"{self.ref.api_host} answered {code}{said}", credentials=self.used)


class _TokenRefused(requests.RequestException):
    def __init__(self, answer: requests.Response) -> None:
        super().__init__(f"the token service refused ({answer.status_code}{_error_message(answer)})")
        self.answer = answer


def _basic_header(basic: Basic) -> str:
    return "Basic " + base64.b64encode(f"{basic.username}:{basic.password}".encode()).decode()


def _json(response: requests.Response) -> dict[str, Any]:
    try:
        body = response.json()
    except ValueError:
        return {}
    return body if isinstance(body, dict) else {}


def _error_codes(response: requests.Response) -> set[str]:
    errors = _json(response).get("errors") or []
    return {str(e.get("code")) for e in errors if isinstance(e, dict)}


def _error_message(response: requests.Response) -> str:
    errors = _json(response).get("errors") or []
    first = next((e for e in errors if isinstance(e, dict)), None)
    if first is None:
        return ""
    text = f": {first.get('code', '')} {first.get('message', '')}".rstrip()
    return text if len(text) <= MESSAGE_CHARS else text[: MESSAGE_CHARS - 3] + "..."


ERRNO = re.compile(r"\[Errno -?\d+\] [^'\")]+")


def _reason(exc: BaseException) -> str:
    """The socket's own words (``[Errno 111] Connection refused``) rather than urllib3's nested retelling."""
    found = ERRNO.search(str(exc))
    return found.group(0).strip() if found else _first_line(exc)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    line = text.splitlines()[0] if text else type(exc).__name__
    return line if len(line) <= MESSAGE_CHARS else line[: MESSAGE_CHARS - 3] + "..."
