"""A library caller's arguments, checked for their kind before anything runs (``pwdeploy.api``).

Python iterates a ``str`` as its characters, so a path given where a list of paths is meant would be read as one
path per character (``"/abs/train.py"`` starts with ``"/"``: the whole machine); a number given as text would
reach a comparison deep inside (a ``TypeError``) or a server (which refuses it, and the refusal reads as the
server's fault). Each function returns the value as the code below expects it, or raises the caller's
``ArgumentError`` (a ``ConfigError``) naming the argument.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from pwdeploy.errors import ArgumentError


def a_kind(value: object) -> str:
    """``a str``, ``an int``: the type of a value, for a message."""
    name = type(value).__name__
    return f"an {name}" if name[0].lower() in "aeiou" else f"a {name}"


def sequence(value: object, name: str, example: str) -> tuple[object, ...]:
    """Items of a list or tuple (any sequence but text: a ``str`` or ``bytes`` is one value, not a sequence)."""
    if isinstance(value, (str, bytes, bytearray)) or not isinstance(value, Sequence):
        raise ArgumentError(name, f"must be a list, not {a_kind(value)}", hint=f"e.g. {name}={example}")
    return tuple(value)


def strings(value: object, name: str, example: str) -> tuple[str, ...]:
    """A list of strings: a command's words, SLICE@STEP events."""
    items = sequence(value, name, example)
    for index, item in enumerate(items):
        if not isinstance(item, str):
            raise ArgumentError(f"{name}[{index}]", f"must be a string, not {a_kind(item)}")
    return tuple(str(item) for item in items)


def paths(value: object, name: str) -> tuple[Path, ...]:
    """A list of paths (``str`` or ``os.PathLike``)."""
    items = sequence(value, name, "['train.py']")
    return tuple(path(item, f"{name}[{index}]") for index, item in enumerate(items))


def path(value: object, name: str) -> Path:
    if not isinstance(value, (str, os.PathLike)):
        raise ArgumentError(name, f"must be a path (a str or a pathlib.Path), not {a_kind(value)}")
    return Path(value)


def optional_path(value: object, name: str) -> Path | None:
    return None if value is None else path(value, name)


def whole(value: object, name: str, minimum: int) -> int:
    """An int (not a bool, not text) of at least ``minimum``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ArgumentError(name, f"must be an int, not {a_kind(value)}")
    if value < minimum:
        raise ArgumentError(name, f"{value} is below {minimum}")
    return value


def optional_whole(value: object, name: str, minimum: int) -> int | None:
    return None if value is None else whole(value, name, minimum)


def seconds(value: object, name: str) -> float | None:
    """A number of seconds above 0, or None."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ArgumentError(name, f"must be a number of seconds, not {a_kind(value)}")
    if not 0 < value < float("inf"):
        raise ArgumentError(name, f"{value} is not a number of seconds above 0")
    return float(value)


def text(value: object, name: str) -> str:
    if not isinstance(value, str):
        raise ArgumentError(name, f"must be a str, not {a_kind(value)}")
    return value


def optional_text(value: object, name: str) -> str | None:
    return None if value is None else text(value, name)


def environment(value: object, name: str) -> Mapping[str, str] | None:
    """A mapping of variable names to values, both ``str`` (as ``os.environ``), or None."""
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise ArgumentError(name, f"must be a mapping of str to str (as os.environ), not {a_kind(value)}")
    for key, item in value.items():
        if not isinstance(key, str) or not isinstance(item, str):
            raise ArgumentError(f"{name}[{key!r}]", f"must map a str to a str, not {a_kind(key)} to {a_kind(item)}")
        if "\0" in key + item or "=" in key or not key:  # what execve cannot pass (os.environ holds none of these)
            raise ArgumentError(f"{name}[{key!r}]", "is not a variable a program can be given (empty, '=' or NUL)")
    return value


def mapping(value: object, name: str) -> Mapping[str, object] | None:
    """A mapping (its values are checked by whoever reads them), or None."""
    if value is not None and not isinstance(value, Mapping):
        raise ArgumentError(name, f"must be a mapping, not {a_kind(value)}")
    return value
