"""Lists as the API server prints them.

The Table form `kubectl get` asks for (``Accept: application/json;as=Table;v=v1;g=meta.k8s.io``,
``includeObject=None``), one row of printed cells an object, without the object. A pod's row is about 160 bytes
where its object is about 13 KB (some 40 % of it ``metadata.managedFields``), so a view that needs only what the
server prints reads a 1,024-pod job in a hundredth of the bytes, and decodes and decrypts a hundredth of them
(kube-apiserver's TableConvertor; the columns are the server's printers', as kubectl shows them).

A server that does not print Tables for a resource answers with the plain list (``application/json`` is offered
after the Table); that, a list whose continue token expired, and a Table without the columns the caller needs are
``None``: the caller reads the objects instead."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pwdeploy.kube.answers import json_type
from pwdeploy.kube.api_failures import ExpiredList, malformed
from pwdeploy.kube.paging import pages
from pwdeploy.kube.seam import Action, Kube

TABLE_ACCEPT = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"
Row = dict[str, str]  # a row's cells by column name, each as text


def list_rows(
    kube: Kube, action: Action, path: str, columns: Sequence[str], *, query: Sequence[tuple[str, str]] = ()
) -> list[Row] | None:
    """Every row of the list at ``path``, page by page as ``Kube.iter_items`` reads objects (pwdeploy.kube.paging),
    each the cells of ``columns``; None when the server answers with anything but a Table holding them, or the
    list changed past what it keeps (410) mid-way. A Table of the wrong shape is an ``ApiError``."""
    rows: list[Row] = []
    try:
        for answer in pages(kube, action, path, query=[*query, ("includeObject", "None")], accept=TABLE_ACCEPT):
            if answer.get("kind") != "Table":
                return None
            page = _rows(answer, columns)
            if page is None:
                return None
            if isinstance(page, str):
                raise malformed(action, kube, page, None)
            rows += page
    except ExpiredList:
        return None
    return rows


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
