"""Does an image exist? One manifest request to its registry (Docker Registry HTTP API v2, which Artifact Registry,
Docker Hub and the distribution registry all speak).

HEAD /v2/<repository>/manifests/<tag or digest> with the manifest types docker accepts (GET when HEAD is
refused). A 401 names how to authenticate: ``Bearer realm=...,service=...,scope=...`` (a token from the realm) or
``Basic``. When a manifest is missing, the tag list tells a missing tag from a missing repository.

Every answer is untrusted input. One deadline bounds a whole check (every connection and every answer, however
slowly the bytes come), every body read stops at ``BODY_LIMIT``, ``found`` needs a manifest (a valid
``Docker-Content-Digest`` on HEAD, or a manifest media type on GET) and JSON of the wrong shape is an ``error``.
Credentials go to a token service only over https (plain http only for the loopback registry's own host) and only
on the registry's own host; a token service elsewhere gets the credentials stored for its own host, or none. No
token, password or URL userinfo is ever part of a ``Lookup``. Every problem becomes a ``Lookup``; callers never
see an exception.

requests, not a registry library: the checks need one manifest request, the token flow and docker's credential
lookup; the Python registry clients looked at either go through a docker daemon (docker SDK) or leave out
credential helpers and Google's credentials, which are the part that needs care here.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any, Literal
from urllib.parse import urljoin, urlsplit, urlunsplit

import requests

from pwdeploy.imageref import ImageRef, is_digest
from pwdeploy.registry import responses
from pwdeploy.registry.credentials import Basic, CredentialLookup
from pwdeploy.registry.responses import BadRegistryAnswer, Body
from pwdeploy.registry.token_flow import TokenFlow, TokenRefused

DEADLINE = 10.0  # seconds for one image check: every connection and every byte of every answer
CONNECT_TIMEOUT = 3.0  # seconds for one connection, within the deadline
MANIFEST_TYPES = (
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
    "application/vnd.docker.distribution.manifest.v2+json",
)
ACCEPT = ", ".join(MANIFEST_TYPES)
USER_AGENT = "pwdeploy-preflight"
REDIRECTS = (301, 302, 303, 307, 308)
MAX_REDIRECTS = 5

# found; the tag or digest is not in the repository; the repository does not exist; the registry refused us;
# no answer; anything else.
LookupKind = Literal["found", "manifest_unknown", "name_unknown", "denied", "unreachable", "error"]


@dataclass(frozen=True)
class Lookup:
    kind: LookupKind
    detail: str  # the digest when found; otherwise what went wrong, in words
    tags: tuple[str, ...] = ()  # manifest_unknown: the tags the repository has (when it lists them)
    credentials: str | None = None  # where the credentials sent came from; None: anonymous
    withheld: str | None = None  # why known credentials were not sent (a token service elsewhere or over http)

    @property
    def how(self) -> str:
        """How the registry was asked, in words: with whose credentials, or anonymously (and why, when
        credentials were known)."""
        return how(self.credentials, self.withheld)


def how(credentials: str | None, withheld: str | None) -> str:
    if credentials is not None:
        return f"with credentials from {credentials}"
    return f"anonymously; {withheld}" if withheld else "anonymously"


class RegistryClient:
    """Manifest lookups; each in its own session and thread, so lookups can run side by side and none outlives
    its deadline."""

    def __init__(self, credentials: CredentialLookup, *, deadline: float = DEADLINE) -> None:
        self._credentials = credentials
        self._deadline = deadline

    def lookup(self, ref: ImageRef) -> Lookup:
        clock = Deadline(self._deadline)
        answer: list[Lookup] = []
        worker = threading.Thread(
            target=lambda: answer.append(self._lookup(ref, clock)), name=f"registry {ref.api_host}", daemon=True
        )
        worker.start()
        # While the worker asks for credentials the clock stands still (and the end moves on by that time).
        while worker.is_alive() and clock.left() > 0:
            worker.join(clock.left() + 0.05)
        if answer:
            return answer[0]
        # Still waiting: the worker is left to its socket timeouts (a daemon thread: it never holds up an exit).
        return Lookup("unreachable", clock.late(ref.api_host))

    def _lookup(self, ref: ImageRef, clock: Deadline) -> Lookup:
        with _Session() as session:
            session.headers.update({"User-Agent": USER_AGENT, "Accept-Encoding": "identity"})
            conversation = _Conversation(session, ref, self._credentials, clock)
            try:
                found = conversation.lookup()
            except TokenRefused as exc:
                flow = conversation.flow
                found = Lookup("denied", f"{ref.api_host}: {exc}, asked {how(flow.used, flow.withheld)}")
            except OutOfTime:
                found = Lookup("unreachable", clock.late(ref.api_host))
            except BadRegistryAnswer as exc:
                found = Lookup("error", f"{ref.api_host}: {exc}")
            except requests.ConnectTimeout:
                found = Lookup("unreachable", f"cannot connect to {ref.api_host} within {CONNECT_TIMEOUT:g} s")
            except requests.Timeout:
                found = Lookup("unreachable", clock.late(ref.api_host))
            except requests.RequestException as exc:
                found = Lookup("unreachable", f"cannot reach {ref.base_url()}: {responses.reason(exc)}")
            except Exception as exc:  # an answer no branch above foresaw: still a row, never a crash
                found = Lookup("error", f"{ref.api_host}: unexpected answer ({type(exc).__name__})")
            flow = conversation.flow
            found = replace(found, credentials=flow.used, withheld=flow.withheld)
            tags = tuple(tag for tag in found.tags if responses.scrub(tag, flow.secrets) == tag)  # none echoing one
            return replace(found, detail=responses.scrub(found.detail, flow.secrets), tags=tags)


class OutOfTime(Exception):
    """The check's deadline passed."""


class Deadline:
    """One deadline for a whole check; time spent asking for credentials (a helper, Google's token) does not
    count: it is not the registry's."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.end = time.monotonic() + seconds
        self._paused_at: float | None = None

    def left(self) -> float:
        paused = self._paused_at
        return self.end - (paused if paused is not None else time.monotonic())

    def timeout(self) -> tuple[float, float]:
        """(connect, read) for the next request: what is left, at most CONNECT_TIMEOUT to connect."""
        left = self.left()
        if left <= 0:
            raise OutOfTime
        return min(CONNECT_TIMEOUT, left), left

    def check(self) -> None:
        if self.left() <= 0:
            raise OutOfTime

    @contextmanager
    def paused(self) -> Iterator[None]:
        self._paused_at = time.monotonic()
        try:
            yield
        finally:
            self.end += time.monotonic() - self._paused_at
            self._paused_at = None

    def late(self, host: str) -> str:
        return f"{host} did not answer completely within {self.seconds:g} s"


class _Session(requests.Session):
    """A session that sends only the credentials this module chose (never ~/.netrc's) and leaves redirects to
    ``_Conversation.get``: requests reads a redirect's whole body, even with allow_redirects=False."""

    def __init__(self) -> None:
        super().__init__()
        self.auth = _no_auth  # set, so requests does not look in ~/.netrc

    def resolve_redirects(  # type: ignore[override]  # the answer is "no redirects", whatever was asked
        self, *args: Any, **kwargs: Any
    ) -> Iterator[requests.Response]:
        return iter(())


def _no_auth(request: requests.PreparedRequest) -> requests.PreparedRequest:
    return request


def _redirected(url: str, location: str, headers: dict[str, str]) -> tuple[str, dict[str, str]]:
    """Where a redirect leads, and the headers to send there: no Authorization on another scheme, host or port."""
    target = urljoin(url, location.strip())
    before, after = urlsplit(url), urlsplit(target)
    if after.scheme not in ("http", "https") or not after.hostname:
        raise BadRegistryAnswer("redirected to something that is not an http(s) URL")
    if (before.scheme, before.hostname, before.port) != (after.scheme, after.hostname, after.port):
        headers = {name: value for name, value in headers.items() if name.lower() != "authorization"}
    return urlunsplit(after._replace(netloc=after.netloc.rpartition("@")[2])), headers


class _Conversation:
    """The requests of one lookup, carrying the Authorization a challenge earned to the next request."""

    def __init__(
        self, session: requests.Session, ref: ImageRef, credentials: CredentialLookup, clock: Deadline
    ) -> None:
        self.session, self.ref, self.clock = session, ref, clock
        self.flow = TokenFlow(ref, self._credentials_timed(credentials), self.get)
        self._challenged = False

    def _credentials_timed(self, credentials: CredentialLookup) -> CredentialLookup:
        def lookup(host: str) -> Basic | None:
            with self.clock.paused():
                return credentials(host)

        return lookup

    def lookup(self) -> Lookup:
        headers = {"Accept": ACCEPT}
        head = self.request("HEAD", self.ref.manifest_url(), headers)
        if head.status in (400, 405, 501):  # HEAD refused: ask with GET
            return self._judge(self.request("GET", self.ref.manifest_url(), headers))
        if head.status == 200:
            digest = head.headers.get("Docker-Content-Digest", "").strip()
            if is_digest(digest):
                return self._found(digest)
            return self._judge(self.request("GET", self.ref.manifest_url(), headers))  # no digest: read it
        return self._judge(head)

    def _judge(self, answer: Body) -> Lookup:
        if answer.status == 200:
            return self._found(self._manifest_digest(answer))
        if answer.status == 404:
            return self._missing(answer)
        return self._refused(answer)

    def _manifest_digest(self, answer: Body) -> str:
        """The digest of a GET's manifest, computed from its bytes; BadRegistryAnswer when the body is not a manifest or
        its Docker-Content-Digest names other bytes."""
        media_type = answer.headers.get("Content-Type", "").split(";", 1)[0].strip()
        if media_type not in MANIFEST_TYPES and responses.media_type(answer) not in MANIFEST_TYPES:
            raise BadRegistryAnswer(
                f"answered 200 but not with an image manifest (Content-Type {responses.shorten(media_type) or 'none'})"
            )
        said = answer.headers.get("Docker-Content-Digest", "").strip()
        wanted = said if is_digest(said) else self.ref.digest or "sha256:"
        algorithm = wanted.split(":", 1)[0]
        computed = f"{algorithm}:{hashlib.new(algorithm, answer.content).hexdigest()}"
        if is_digest(said) and said != computed:
            raise BadRegistryAnswer(f"sent a manifest whose digest is {computed}, not the {said} it named")
        return computed

    def _found(self, digest: str) -> Lookup:
        if self.ref.digest is not None and digest != self.ref.digest:
            raise BadRegistryAnswer(f"answered the manifest {digest} when asked for {self.ref.digest}")
        return Lookup("found", digest)

    def request(self, method: str, url: str, headers: dict[str, str]) -> Body:
        """One request; on a first 401, answer the challenge and send it again."""
        answer = self._send(method, url, headers)
        if answer.status == 401 and not self._challenged:
            self._challenged = True
            if self.flow.answer(answer.headers.get("WWW-Authenticate", "")):
                answer = self._send(method, url, headers)
        return answer

    def _send(self, method: str, url: str, headers: dict[str, str]) -> Body:
        sent = {**headers, **self.flow.authorization()}
        return self.get(method, url, sent, None)

    def get(self, method: str, url: str, headers: dict[str, str], params: dict[str, str] | None) -> Body:
        """One bounded request: the deadline's timeouts, the body read up to BODY_LIMIT, redirects followed here
        (requests would read a redirect's whole body) without the Authorization once they leave the host."""
        for _ in range(MAX_REDIRECTS + 1):
            response = self.session.request(
                method, url, headers=headers, params=params, timeout=self.clock.timeout(), stream=True,
                allow_redirects=False,
            )  # fmt: skip
            with response:  # closed unread when it is a redirect
                location = response.headers.get("Location") if response.status_code in REDIRECTS else None
                if location is None:
                    return responses.read(response, self.clock.check)
                url, headers = _redirected(response.url, location, headers)
            params = None  # the Location carries its own query
            if response.status_code == 303 and method != "HEAD":
                method = "GET"
        raise BadRegistryAnswer(f"redirected more than {MAX_REDIRECTS} times")

    def _missing(self, answer: Body) -> Lookup:
        if "NAME_UNKNOWN" in responses.error_codes(answer):
            return Lookup("name_unknown", f"repository {self.ref.name} does not exist")
        listing = self.request("GET", self.ref.tags_url(), {"Accept": "application/json"})
        if listing.status == 404:
            return Lookup("name_unknown", f"repository {self.ref.name} does not exist")
        tags = responses.tags(listing) if listing.status == 200 else ()
        what = f"digest {self.ref.digest}" if self.ref.digest else f"tag {self.ref.manifest!r}"
        return Lookup("manifest_unknown", f"{what} is not in {self.ref.name}", tags)

    def _refused(self, answer: Body) -> Lookup:
        code, said = answer.status, responses.error_message(answer)
        if code in (401, 403):
            asked = how(self.flow.used, self.flow.withheld)
            return Lookup("denied", f"{self.ref.api_host} refused access {asked} ({code}{said})")
        return Lookup("error", f"{self.ref.api_host} answered {code}{said}")
