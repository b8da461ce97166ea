"""Answering a registry's 401 challenge, and whose credentials may go where.

``Basic``: the registry's own credentials, to the registry itself. ``Bearer realm=...``: a token from the realm.
The realm is named by the registry's answer, so it is untrusted: the registry's credentials go to it only over
https (plain http only when the registry is a loopback one and the realm is on its host) and only on one of the
registry's own hosts (``credentials.registry_hosts``: Docker Hub's token service, auth.docker.io, is one of Hub's).
A realm anywhere else is asked anonymously: it gets neither these credentials nor those stored for its own host
(a token earned there would then be handed to this registry). ``withheld`` says why known credentials stayed
home, so the row can say it asked anonymously and why.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Callable
from urllib.parse import urlsplit, urlunsplit

from pwdeploy.imageref import ImageRef
from pwdeploy.registry import credentials, responses
from pwdeploy.registry.credentials import Basic, CredentialLookup
from pwdeploy.registry.responses import BadRegistryAnswer, Body

CHALLENGE_PARAM = re.compile(r'(\w+)=(?:"([^"]*)"|([^,\s]*))')
Send = Callable[[str, str, dict[str, str], dict[str, str] | None], Body]  # method, url, headers, params


class TokenRefused(Exception):
    """The token service said no; the message is for the row."""


class TokenFlow:
    """The Authorization a challenge earned, and whose credentials went out to earn it."""

    def __init__(self, ref: ImageRef, lookup: CredentialLookup, send: Send) -> None:
        self.ref = ref
        self._credentials = lookup
        self._send = send
        self._authorization: str | None = None
        self.used: str | None = None  # the source of the credentials sent, if any
        self.withheld: str | None = None  # why the registry's credentials were not sent, if they were not
        self.secrets: list[str] = []  # every password and token seen: never to be printed

    def authorization(self) -> dict[str, str]:
        return {"Authorization": self._authorization} if self._authorization else {}

    def answer(self, challenge: str) -> bool:
        """Earn an Authorization header for the challenge; False when there is nothing to answer it with.
        TokenRefused when the token service refuses, BadRegistryAnswer when its answer is not one."""
        scheme, params = parse_challenge(challenge)
        if scheme == "basic":
            basic = self._lookup(self.ref.registry)
            if basic is None:
                return False
            self.used, self._authorization = basic.source, basic_header(basic)
            return True
        if scheme != "bearer" or not params.get("realm"):
            return False
        realm = _realm(params["realm"])
        basic = self._realm_credentials(realm)
        query = {"service": params["service"]} if params.get("service") else {}
        query["scope"] = params.get("scope") or f"repository:{self.ref.repository}:pull"
        headers = {"Accept": "application/json"}
        if basic is not None:
            headers["Authorization"] = basic_header(basic)
            self.used = basic.source
        answer = self._send("GET", realm, headers, query)
        if answer.status != 200:
            raise TokenRefused(f"the token service refused ({answer.status}{responses.error_message(answer)})")
        token = responses.token(answer)
        self.secrets.append(token)
        self._authorization = f"Bearer {token}"
        return True

    def _realm_credentials(self, realm: str) -> Basic | None:
        """The registry's credentials when they may go to ``realm``: on one of the registry's own hosts, over
        https (or the loopback registry's plain http); otherwise None, and ``withheld`` says why."""
        parts = urlsplit(realm)
        own = parts.hostname in credentials.registry_hosts(self.ref.registry)
        secure = parts.scheme == "https" or (own and self.ref.scheme == "http")
        mine = self._lookup(self.ref.registry)
        if mine is None or (own and secure):
            return mine
        why = "plain http" if not secure else f"a host other than {self.ref.registry}'s"
        where = f"{parts.scheme}://{parts.netloc}"
        self.withheld = f"the credentials from {mine.source} were not sent to the token service at {where}: {why}"
        return None

    def _lookup(self, host: str) -> Basic | None:
        found = self._credentials(host)
        if found is not None:  # a registry may echo either form back in an error message
            self.secrets += [found.password, basic_header(found).split(" ", 1)[1]]
        return found


def parse_challenge(challenge: str) -> tuple[str, dict[str, str]]:
    """(scheme in lower case, parameters with lower-case names) of a WWW-Authenticate header."""
    scheme, _, params_text = challenge.strip().partition(" ")
    params = {
        m.group(1).lower(): m.group(2) if m.group(2) is not None else m.group(3)
        for m in CHALLENGE_PARAM.finditer(params_text)
    }
    return scheme.lower(), params


def basic_header(basic: Basic) -> str:
    return "Basic " + base64.b64encode(f"{basic.username}:{basic.password}".encode()).decode()


def _realm(text: str) -> str:
    """The realm as a URL to ask, without userinfo; BadRegistryAnswer when it is not an http(s) URL."""
    try:
        parts = urlsplit(text.strip())
        host = parts.hostname
    except ValueError:
        host = None
    if host is None or parts.scheme not in ("http", "https"):
        raise BadRegistryAnswer("named a token realm that is not an http(s) URL")
    netloc = parts.netloc.rpartition("@")[2]
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, ""))
