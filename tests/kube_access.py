"""Who may ask the API stub what: authentication (a bearer token's user, else the CN of the client certificate the
TLS handshake verified, as the API server's token and x509 authenticators do; else anonymous, when allowed) and the
forbidden rules (``forbid(verb, plural)``), which answer every request and every SelfSubjectAccessReview alike."""

from __future__ import annotations

from typing import NoReturn

from tests.kube_answers import Recorded, Reply, forbidden, status_body


class Access:
    def __init__(self, tokens: dict[str, str] | None = None) -> None:
        self.tokens = tokens or {"stub-token": "alice"}  # bearer token -> user name
        self.anonymous: str | None = None  # the user of requests without credentials (None: they get 401)
        self.forbidden: set[tuple[str, str]] = set()  # (verb, plural); a subresource as "pods/log"

    def forbid(self, verb: str, plural: str) -> None:
        self.forbidden.add((verb, plural))

    def user_of(self, r: Recorded) -> str | None:
        """Who sent ``r``: the user of its bearer token, else the CN of its client certificate."""
        auth = r.headers.get("Authorization") or r.headers.get("authorization") or ""
        return self.tokens.get(auth.removeprefix("Bearer ").strip()) or r.peer or self.anonymous

    def _user(self, r: Recorded) -> str:
        return self.user_of(r) or "system:anonymous"

    def _authenticate(self, r: Recorded) -> None:
        if self.user_of(r) is None:
            raise Reply(401, status_body(401, "Unauthorized", "Unauthorized"))

    def _check_rbac(self, r: Recorded, verb: str, plural: str, group: str, ns: str | None, name: str | None) -> None:
        if (verb, plural) in self.forbidden:
            self._forbidden(r, verb, plural, group, ns, name)

    def _forbidden(self, r: Recorded, verb: str, plural: str, group: str, ns: str | None, name: str | None) -> NoReturn:
        raise forbidden(self._user(r), verb, plural, group, ns, name)

    def _access_review(self, r: Recorded) -> NoReturn:
        """Allowed unless ``forbid(verb, plural)`` (``pods/log`` for a subresource) says otherwise."""
        attributes = (r.body or {}).get("spec", {}).get("resourceAttributes") or {}
        plural = "/".join(p for p in (attributes.get("resource"), attributes.get("subresource")) if p)
        allowed = (attributes.get("verb"), plural) not in self.forbidden
        review = {**r.body, "status": {"allowed": allowed, **({} if allowed else {"reason": "stub: forbidden"})}}
        raise Reply(201, review)
