"""A list read page by page, as kubectl's ``--chunk-size`` (500) reads it (client-go tools/pager): ``limit``
items an answer, then the answer's ``metadata.continue`` token. The objects (``Kube.iter_items``) and the rows the
server prints (pwdeploy.kube.tables) are read through it."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, Protocol

from pwdeploy.kube.api_failures import ApiError, ExpiredList, malformed
from pwdeploy.kube.bounds import LIST_PAGE, MAX_CONTINUE, MAX_PAGES
from pwdeploy.kube.resources import Action


class Requester(Protocol):
    """What the pager needs of ``pwdeploy.kube.seam.Kube`` (which imports the pager)."""

    def request(
        self, action: Action, method: str, path: str, *, query: Sequence[tuple[str, str]] = (), accept: str = ...
    ) -> Any: ...

    def where(self) -> str: ...


def pages(
    kube: Requester,
    action: Action,
    path: str,
    *,
    query: Sequence[tuple[str, str]] = (),
    size: int = LIST_PAGE,
    first_page: int | None = None,
    accept: str = "application/json",
) -> Iterator[dict[str, Any]]:
    """Each answer of the list at ``path`` (``first_page``: fewer items in the first, which then comes sooner). A
    token that expired (410) is an ``ExpiredList`` (the answers before it are a part of an older list); a token of
    the wrong shape, or more than ``MAX_PAGES`` pages, is an ``ApiError``."""
    token: str | None = None
    for _ in range(MAX_PAGES):
        limit = first_page if first_page is not None and token is None else size
        paged = [*query, ("limit", str(limit))] + ([("continue", token)] if token else [])
        try:
            answer: dict[str, Any] = kube.request(action, "GET", path, query=paged, accept=accept)
        except ApiError as exc:
            if token is None or exc.status != 410:
                raise
            raise ExpiredList(exc.message, status=410, hint="run the command again") from None
        yield answer
        previous, token = token, (answer.get("metadata") or {}).get("continue")  # metadata: checked an object
        if not token:
            return
        if not isinstance(token, str) or len(token) > MAX_CONTINUE or token == previous:
            raise malformed(action, kube, "a `metadata.continue` that is not a new, short string", None)
    raise malformed(action, kube, f"more than {MAX_PAGES} pages of {size} items", None)
