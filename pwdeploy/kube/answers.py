"""Answers of the Kubernetes API server, read as untrusted input: bounded in size and time, parsed as one JSON
object, lists checked to hold objects, and the parts every object shares checked for their JSON types. What is
wrong is a ``BadAnswer``; ``Kube.request`` (seam.py) turns it into an ``ApiError`` naming the request."""

from __future__ import annotations

import json
import re
import time
from typing import Any, NamedTuple

from pwdeploy import text as text_rule

MAX_ANSWER_BYTES = 128 * 2**20  # a list of every node of a large cluster fits; a runaway body does not
EXCERPT_CHARS = 120  # how much of an answer that is not JSON an error quotes


class Answer(NamedTuple):
    """A response as read: its status, its content type and its body (at most ``MAX_ANSWER_BYTES``)."""

    status: int
    content_type: str
    data: bytes


class BadAnswer(Exception):
    """What was wrong with an answer's body; ``Kube.request`` turns it into an ``ApiError`` naming the request."""

    def __init__(self, what: str, status: int | None) -> None:
        super().__init__(what)
        self.what, self.status = what, status


def read_answer(raw: Any, deadline_at: float) -> Answer:
    """Read a urllib3 response's body, bounded in size and in time; a body that breaks off is a ``BadAnswer``."""
    import urllib3

    chunks: list[bytes] = []
    size = 0
    status = int(raw.status)
    content_type = str(raw.headers.get("Content-Type") or "")
    read = getattr(raw, "read1", raw.read)  # read1 (urllib3 >= 2.3) returns what has arrived, so the deadline holds
    try:
        while chunk := read(65536):
            chunks.append(chunk)
            size += len(chunk)
            if size > MAX_ANSWER_BYTES:
                raise BadAnswer(f"{status} larger than {MAX_ANSWER_BYTES // 2**20} MiB (not read)", status)
            if time.monotonic() > deadline_at:
                raise BadAnswer(f"{status} still arriving at the deadline, after {size} bytes", status)
    except (urllib3.exceptions.HTTPError, OSError) as exc:
        began = excerpt(b"".join(chunks))
        raise BadAnswer(f"{status} that broke off after {size} bytes ({type(exc).__name__}): {began}", status) from None
    finally:
        raw.release_conn()
    return Answer(status, content_type, b"".join(chunks))


class OutOfTime(Exception):
    """A body still arriving at its deadline (``read_within``); ``arrived``: its bytes so far."""

    def __init__(self, arrived: int) -> None:
        super().__init__(f"{arrived} bytes arrived")
        self.arrived = arrived


def read_within(raw: Any, deadline_at: float, max_bytes: int) -> bytes:
    """A urllib3 response's whole body by ``deadline_at`` (``time.monotonic``), at most ``max_bytes`` of it. Each
    read may wait only for the time left, so a server that trickles bytes cannot stretch the bound: ``OutOfTime``
    when it runs out, a ``BadAnswer`` when the body is larger or breaks off. A connection left with unread bytes
    is closed, not reused."""
    import urllib3

    chunks: list[bytes] = []
    size, whole = 0, False
    sock = getattr(getattr(raw, "connection", None), "sock", None)  # urllib3 2: the connection the body arrives on
    settimeout = getattr(sock, "settimeout", None)  # without it (a TLS-in-TLS proxy tunnel), reads wait their timeout
    read = getattr(raw, "read1", raw.read)
    try:
        while (left := deadline_at - time.monotonic()) > 0:
            if settimeout is not None:
                settimeout(left)
            chunk = read(65536)
            if not chunk:
                whole = True
                return b"".join(chunks)
            chunks.append(chunk)
            size += len(chunk)
            if size > max_bytes:
                raise BadAnswer(f"{raw.status} larger than {max_bytes} bytes (the rest not read)", int(raw.status))
        raise OutOfTime(size)
    except urllib3.exceptions.ReadTimeoutError:
        raise OutOfTime(size) from None
    except (urllib3.exceptions.HTTPError, OSError) as exc:
        began = excerpt(b"".join(chunks))
        raise BadAnswer(
            f"{raw.status} that broke off after {size} bytes ({type(exc).__name__}): {began}", int(raw.status)
        ) from None
    finally:
        if not whole:
            raw.close()
        raw.release_conn()


def printable(text: str, limit: int = 2000) -> str:
    """A server's message as a terminal may show it (pwdeploy.text's rule: controls made visible, a cut never
    inside an escape), at most ``limit`` characters."""
    return text_rule.printable(text, limit)


def excerpt(data: bytes) -> str:
    """The first bytes of an answer, printable and bounded, for an error message: ``'<html><head>...'``."""
    text = data[: EXCERPT_CHARS * 4].decode("utf-8", "replace")
    clean = text_rule.one_line(text, EXCERPT_CHARS)
    return repr(clean + ("..." if len(data) > len(text) and not clean.endswith("...") else ""))


def json_object(answer: Answer) -> dict[str, Any]:
    """The answer as a JSON object (every Kubernetes API answer is one); anything else is a ``BadAnswer``."""
    if not answer.data:
        return {}
    try:
        parsed = json.loads(answer.data)
    except (ValueError, RecursionError):
        what = f"{answer.content_type or 'no content type'}, not JSON"
        parsed = None
    else:
        what = f"JSON that is {json_type(parsed)}, not an object"
    if not isinstance(parsed, dict):
        raise BadAnswer(f"{answer.status} ({what}): {excerpt(answer.data)}", answer.status)
    problem = object_shape(parsed)
    if problem is not None:
        raise BadAnswer(f"{answer.status} and an object whose {problem}", answer.status)
    return parsed


def items_of(answer: dict[str, Any]) -> list[dict[str, Any]]:
    """The ``items`` of a list answer: a list (or null) of objects, each with ``metadata`` holding a ``name``."""
    items = answer.get("items")
    if items is None:
        return []
    if not isinstance(items, list):
        raise BadAnswer(f"`items` that is {json_type(items)}, not a list", None)
    for index, item in enumerate(items):
        meta = item.get("metadata") if isinstance(item, dict) else None
        if not isinstance(meta, dict) or not isinstance(meta.get("name"), str):
            raise BadAnswer(f"items[{index}] that is not an object with metadata.name", None)
        problem = object_shape(item)
        if problem is not None:
            raise BadAnswer(f"items[{index}] whose {problem}", None)
    return items


def object_shape(obj: dict[str, Any]) -> str | None:
    """What is wrong with the parts every Kubernetes object shares (``metadata``, its name, labels and annotations,
    ``spec``, ``status``), or None; a ``Status`` answer (whose status is a word) is left alone."""
    if obj.get("kind") == "Status":
        return None
    for part in ("metadata", "spec", "status"):
        if part in obj and not isinstance(obj[part], dict):
            return f"`{part}` is {json_type(obj[part])}, not an object"
    meta = obj.get("metadata") or {}
    for key in ("name", "namespace"):
        if key in meta and not isinstance(meta[key], str):
            return f"`metadata.{key}` is {json_type(meta[key])}, not a string"
    for key in ("labels", "annotations"):
        value = meta.get(key)
        if value is not None and not (isinstance(value, dict) and all(isinstance(v, str) for v in value.values())):
            return f"`metadata.{key}` is not a map of strings"
    return None


def json_type(value: Any) -> str:
    """``an object``, ``a string``, ...: a JSON value's type, as a message names it."""
    names = {dict: "an object", list: "a list", str: "a string", bool: "a boolean", int: "a number", float: "a number"}
    return names.get(type(value), "null" if value is None else type(value).__name__)


def without_userinfo(url: str) -> str:
    """``url`` without ``user:password@``: credentials in a server URL are never shown."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        scheme, rest = "", url
    # Userinfo ends at the last "@" before any query: a password may hold an unencoded "/" (the rare URL with
    # "@" in its path is shown shorter, never a password longer).
    end = min((i for i in (rest.find("?"), rest.find("#")) if i != -1), default=len(rest))
    at = rest.rfind("@", 0, end)
    return f"{scheme}{sep}{rest[at + 1 :]}"


# A field error quoting the object's new value before its reason (apimachinery's field.Error: ``<path>: Invalid
# value: <the value as JSON>: <detail>``): JobSet's webhook quotes a changed spec whole, 6.8 KB for a 2-slice job
# (kubernetes-sigs/jobset pkg/webhooks/jobset_webhook.go ValidateUpdate, ``field is immutable``).
_QUOTED_VALUE = re.compile(
    r"(?P<path>[\w.\[\]-]+): Invalid value: (?P<value>[\[{].{200,}[\]}]): (?P<detail>[^:\[\]{}]+)$", re.S
)


MESSAGE_CHARS = 2000  # of a server's message quoted in an error
MESSAGE_END_CHARS = 400  # the end of a longer one, kept: a field error's reason comes last


def quoted_message(message: str) -> str:
    """A server's message made printable, a long quoted value left out (``short_field_error``), and, when still
    longer than MESSAGE_CHARS, its start and its end (where a reason is) with what lies between left out."""
    shown = printable(short_field_error(message), 10 * MESSAGE_CHARS)
    if len(shown) <= MESSAGE_CHARS:
        return shown
    head = printable(shown, MESSAGE_CHARS - MESSAGE_END_CHARS).removesuffix("...")
    left = len(shown) - len(head) - MESSAGE_END_CHARS
    return f"{head} ... ({left} characters left out) ... {shown[-MESSAGE_END_CHARS:]}"


def short_field_error(message: str) -> str:
    """The message with a long quoted value left out, so its reason shows: ``spec.replicatedJobs: Invalid value
    (6700 characters, left out): field is immutable``."""
    m = _QUOTED_VALUE.search(message)
    if m is None:
        return message
    said = f"{m['path']}: Invalid value ({len(m['value'])} characters, left out): {m['detail']}"
    return message[: m.start()] + said
