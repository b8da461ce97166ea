"""The manifests' YAML text, written directly for the data they hold: what the dumper of `pwdeploy.manifests.to_yaml`
(PyYAML, with libyaml's emitter) writes for them, in a tenth of its time.

PyYAML builds a node per value and runs its representer and serializer in Python: 2 ms of every render for the
JobSet. Manifests hold only dicts with string keys, lists, strings, ints, booleans and None, and the dumper's
settings (block style, two-space indent, sequences in a mapping not indented, no anchors, line width 1000,
multi-line strings as literal blocks) leave one text for each. ``block_yaml`` writes that text, or returns None
for anything it does not decide with certainty (a float, a non-ASCII or very long string, a string a literal block
cannot hold...): the caller then asks PyYAML. The tests hold it to PyYAML's text on random documents.

A string is written plain when YAML would read it back as that string (PyYAML's own resolver decides, as it does
for the dumper), single-quoted otherwise; the rules for where a plain scalar may not start or what it may not hold
(``: ``, `` #``, an indicator first) are YAML 1.1's as the emitter applies them in block context.
"""

from __future__ import annotations

from typing import Any

import yaml

_PRINTABLE = frozenset(map(chr, range(0x20, 0x7F)))  # ASCII without control characters (a tab is escaped)
_FIRST_INDICATORS = frozenset("#,[]{}&*!|>'\"%@`")
_LONGEST = 500  # a scalar's columns beyond which the dumper's line width (1000) may fold it: left to PyYAML
_LONGEST_KEY = 127  # a longer key is a "complex key" (``? key``) to the dumper
# PyYAML's implicit resolvers by first character (bool, int, float, null, timestamp, merge, value), which the
# dumper asks whether a plain scalar would read back as a string.
_IMPLICIT: dict[str | None, list[tuple[str, Any]]] = yaml.resolver.Resolver.yaml_implicit_resolvers
_STR = "tag:yaml.org,2002:str"
_WRITTEN: dict[str, str] = {}  # string -> its scalar; manifests repeat most of their keys and many values


class _Unsure(Exception):
    """A value ``block_yaml`` leaves to PyYAML."""


def block_yaml(document: Any) -> str | None:
    """``document`` (a dict) as the manifests' dumper writes it, or None when that is for PyYAML to say."""
    if type(document) is not dict:  # a subclass (OrderedDict...) is PyYAML's to refuse or represent
        return None
    if not document:
        return "{}\n"
    lines: list[str] = []
    try:
        _mapping(document, 0, lines, lead="")
    except _Unsure:
        return None
    lines.append("")
    return "\n".join(lines)


def _mapping(value: dict[Any, Any], indent: int, lines: list[str], lead: str) -> None:
    """Entries at column ``indent``; the first line starts with ``lead`` (its padding, or a sequence's ``- ``)."""
    for position, (key, item) in enumerate(value.items()):
        if type(key) is not str or len(key) > _LONGEST_KEY:
            raise _Unsure
        start = lead if position == 0 else " " * indent
        _value(f"{start}{_scalar(key)}:", item, indent, lines)


def _sequence(value: list[Any], indent: int, lines: list[str], lead: str) -> None:
    """Items with their ``-`` at column ``indent``; the first line starts with ``lead``."""
    for position, item in enumerate(value):
        dash = f"{lead if position == 0 else ' ' * indent}-"
        if item and type(item) is dict:
            _mapping(item, indent + 2, lines, lead=f"{dash} ")
        elif item and type(item) is list:
            _sequence(item, indent + 2, lines, lead=f"{dash} ")
        else:
            _value(dash, item, indent, lines)


def _value(head: str, item: Any, indent: int, lines: list[str]) -> None:
    """``head`` (``key:`` or ``-``, at column ``indent``) and its value: a scalar or an empty collection on the same
    line, a collection below it (a list under a key not indented), a literal block's lines indented by two."""
    if type(item) is dict and item:
        lines.append(head)
        _mapping(item, indent + 2, lines, lead=" " * (indent + 2))
    elif type(item) is list and item:
        lines.append(head)
        _sequence(item, indent, lines, lead=" " * indent)
    elif type(item) is dict:
        lines.append(f"{head} {{}}")
    elif type(item) is list:
        lines.append(f"{head} []")
    elif type(item) is str and "\n" in item:
        header, body = _literal(item)
        lines.append(f"{head} {header}")
        pad = " " * (indent + 2)
        lines.extend(f"{pad}{line}" if line else "" for line in body)
    else:
        text = _scalar(item)
        if indent + len(text) > _LONGEST:
            raise _Unsure
        lines.append(f"{head} {text}")


def _scalar(value: Any) -> str:
    """A one-line scalar as the dumper writes it."""
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if type(value) is int:
        return str(value)
    if type(value) is not str:
        raise _Unsure
    written = _WRITTEN.get(value)
    if written is None:
        if len(value) > _LONGEST or not _PRINTABLE.issuperset(value):
            raise _Unsure
        written = value if _plain(value) and _reads_as_string(value) else "'" + value.replace("'", "''") + "'"
        if len(_WRITTEN) > 100_000:
            _WRITTEN.clear()
        _WRITTEN[value] = written
    return written


def _reads_as_string(text: str) -> bool:
    """Whether ``text`` (not empty) unquoted reads back as a string, as PyYAML's resolver decides."""
    for tag, pattern in _IMPLICIT.get(text[0], []) + _IMPLICIT.get(None, []):
        if pattern.match(text):
            return bool(tag == _STR)
    return True


def _plain(text: str) -> bool:
    """Whether YAML 1.1's block context lets ``text`` (printable ASCII, one line) stand unquoted."""
    if not text or text[0] == " " or text[-1] == " " or text.startswith(("---", "...")):
        return False
    first, second = text[0], text[1:2]
    if first in _FIRST_INDICATORS or (first in "?:-" and second in ("", " ")):
        return False
    return not (": " in text or text.endswith(":") or " #" in text)


def _literal(text: str) -> tuple[str, list[str]]:
    """A multi-line string's literal block: its header (``|`` or ``|-``) and lines."""
    if text[0] in " \n" or text.endswith("\n\n") or not _PRINTABLE.issuperset(text.replace("\n", "")):
        raise _Unsure  # an indentation indicator, kept trailing lines, or characters that need escapes
    lines = text.split("\n")
    if any(line.endswith(" ") for line in lines):
        raise _Unsure  # a space before a line break: the dumper double-quotes the string
    if text.endswith("\n"):
        return "|", lines[:-1]
    return "|-", lines
