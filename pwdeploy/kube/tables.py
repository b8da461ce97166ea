"""Lists as the API server prints them.

The Table form `kubectl get` asks for (``Accept: application/json;as=Table;
v=v1;g=meta.k8s.io``, ``includeObject=None``), one row of printed cells an object, without the object. A pod's row
is about 160 bytes where its object is about 13 KB (some 40 % of it ``metadata.managedFields``), so a view that
needs only what the server prints reads a 1,024-pod job in a hundredth of the bytes, and decodes and decrypts a
hundredth of them (kube-apiserver's TableConvertor; the columns are the server's printers', as kubectl shows them).

A server that does not print Tables for a resource answers with the plain list (``application/json`` is offered
after the Table); that, a list whose continue token expired, and a Table without the columns the caller needs are
``None``: the caller reads the objects instead."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pwdeploy.kube.answers import json_type
from pwdeploy.kube.api_failures import malformed
from pwdeploy.kube.bounds import LIST_PAGE, MAX_CONTINUE, MAX_PAGES
from pwdeploy.kube.seam import Action, ApiError, Kube

TABLE_ACCEPT = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"
Row = dict[str, str]  # a row's cells by column name, each as text


def list_rows(
    kube: Kube, action: Action, path: str, columns: Sequence[str], *, query: Sequence[tuple[str, str]] = ()
) -> list[Row] | None:
    """Every row of the list at ``path``, page by page as ``Kube.iter_items`` reads objects (``limit``, then the
    ``continue`` token), each the cells of ``columns``; None when the server answers with anything but a Table
    holding them, or the list changed past what it keeps (410) mid-way. A Table of the wrong shape is an
    ``ApiError``."""
    rows: list[Row] = []
    token: str | None = None
    for _ in range(MAX_PAGES):
        paged = [*query, ("includeObject", "None"), ("limit", str(LIST_PAGE))] + (
            [("continue", token)] if token else []
        )
        try:
            answer = kube.request(action, "GET", path, query=paged, accept=TABLE_ACCEPT)
        except ApiError as exc:
            if token is None or exc.status != 410:
                raise
            return None
        if answer.get("kind") != "Table":
            return None
        page = _rows(answer, columns)
        if page is None:
            return None
        if isinstance(page, str):
            raise malformed(action, kube, page, None)
        rows += page
        previous, token = token, (answer.get("metadata") or {}).get("continue")
        if not token:
            return rows
        if not isinstance(token, str) or len(token) > MAX_CONTINUE or token == previous:
            raise malformed(action, kube, "a `metadata.continue` that is not a new, short string", None)
    raise malformed(action, kube, f"more than {MAX_PAGES} pages of {LIST_PAGE} rows", None)


def _rows(table: dict[str, Any], columns: Sequence[str]) -> list[Row] | str | None:
    """The table's rows as cells of ``columns``; None when a column is missing, or what is wrong with its shape."""
    definitions = table.get("columnDefinitions")
    if not isinstance(definitions, list) or not all(isinstance(d, dict) for d in definitions):
        return f"a Table whose `columnDefinitions` is {json_type(definitions)}, not a list of objects"
    names = [d.get("name") for d in definitions]
    if not all(c in names for c in columns):
        return None
    where = {c: names.index(c) for c in columns}
    found = table.get("rows") or []
    if not isinstance(found, list):
        return f"a Table whose `rows` is {json_type(found)}, not a list"
    rows: list[Row] = []
    for index, row in enumerate(found):
        cells = row.get("cells") if isinstance(row, dict) else None
        if not isinstance(cells, list) or len(cells) != len(names):
            return f"a Table whose rows[{index}] does not have one cell a column"
        if not all(isinstance(cells[i], (str, int, float)) for i in where.values()):
            return f"a Table whose rows[{index}] has a cell that is not text or a number"
        rows.append({c: str(cells[i]) for c, i in where.items()})
    return rows
