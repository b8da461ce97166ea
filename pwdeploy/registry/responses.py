"""A registry's answers, read as untrusted input: bodies bounded in size, JSON checked for shape, and the words
taken from them cut short and cleaned of secrets before they reach a row.

Every helper here either returns a value of the expected shape or raises ``BadRegistryAnswer`` with a sentence for the
row; none lets a ``TypeError`` of a surprising answer through.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any, NamedTuple

import requests

from pwdeploy.text import one_line

BODY_LIMIT = 4 * 1024 * 1024  # bytes; a manifest or a token is a few KiB, a tag list rarely 1 MiB
CHUNK = 64 * 1024
MESSAGE_CHARS = 200
ERRNO = re.compile(r"\[Errno -?\d+\] [^'\")]+")
USERINFO = re.compile(r"(?<=://)[^/@\s]+@")


class BadRegistryAnswer(Exception):
    """An answer that is not what the Registry API says it should be; the message is for the row."""


class Body(NamedTuple):
    status: int
    headers: Mapping[str, str]  # case-insensitive (requests' CaseInsensitiveDict)
    content: bytes


def read(response: requests.Response, check: Callable[[], None]) -> Body:
    """The whole answer, at most BODY_LIMIT bytes; ``check`` raises once the deadline has passed (called between
    reads, each of which returns what one socket read brought)."""
    declared = response.headers.get("Content-Length", "")
    if declared.isdigit() and int(declared) > BODY_LIMIT:
        raise BadRegistryAnswer(
            f"announced a body of {int(declared)} bytes, more than the {_mib(BODY_LIMIT)} an answer needs"
        )
    encoding = response.headers.get("Content-Encoding", "identity").strip().lower()
    if encoding not in ("", "identity"):
        raise BadRegistryAnswer(f"sent a {encoding[:40]!r}-encoded body although none was asked for")
    content = bytearray()
    # read1 (urllib3 2) returns what one socket read brought; read (urllib3 1.26) waits for a whole chunk.
    read = getattr(response.raw, "read1", None) or response.raw.read
    if response.request.method != "HEAD":
        while True:
            check()
            chunk = read(CHUNK, decode_content=False)
            if not chunk:
                break
            content += chunk
            if len(content) > BODY_LIMIT:
                raise BadRegistryAnswer(f"sent a body of more than {_mib(BODY_LIMIT)}, more than an answer needs")
    return Body(response.status_code, response.headers, bytes(content))


def json_body(body: Body) -> dict[str, Any]:
    """The body's JSON object; {} when the body is not JSON or not an object (nothing can be read from it)."""
    try:
        data = json.loads(body.content)
    except (ValueError, RecursionError):
        return {}
    return data if isinstance(data, dict) else {}


def errors(body: Body) -> list[Mapping[str, Any]]:
    """The ``errors`` list of an error body; BadRegistryAnswer when it is there but not a list of objects."""
    found = json_body(body).get("errors")
    if found is None:
        return []
    if not isinstance(found, list) or not all(isinstance(item, dict) for item in found):
        raise BadRegistryAnswer(f"answered {body.status} with an 'errors' that is not a list of objects")
    return found


def error_codes(body: Body) -> set[str]:
    return {_text(item.get("code")) for item in errors(body)}


def error_message(body: Body) -> str:
    """``: CODE message`` of the first error, cut short; "" when there is none."""
    first = next(iter(errors(body)), None)
    if first is None:
        return ""
    return shorten(f": {_text(first.get('code'))} {_text(first.get('message'))}".rstrip())


def tags(body: Body) -> tuple[str, ...]:
    """The ``tags`` of a tag list; BadRegistryAnswer when it is not a list of strings (null: none)."""
    found = json_body(body).get("tags")
    if found is None:
        return ()
    if not isinstance(found, list) or not all(isinstance(tag, str) for tag in found):
        raise BadRegistryAnswer("answered the tag list with a 'tags' that is not a list of strings")
    return tuple(shorten(tag) for tag in found)


def media_type(body: Body) -> str | None:
    """The ``mediaType`` a manifest names in its body, when it is a string."""
    found = json_body(body).get("mediaType")
    return found if isinstance(found, str) else None


def token(body: Body) -> str:
    """The token of a token service's answer (``token``, else ``access_token``), with the whitespace around it
    that JSON carries and a header cannot (a trailing newline) removed; BadRegistryAnswer, never naming the token, when
    it is missing or cannot be sent in a header."""
    data = json_body(body)
    found = data.get("token") or data.get("access_token")
    if not isinstance(found, str):
        raise BadRegistryAnswer("the token service answered without a token string")
    found = found.strip()
    if not found or not all(0x21 <= ord(char) <= 0x7E for char in found):
        raise BadRegistryAnswer("the token service answered a token that cannot be sent in a header (not printed)")
    return found


def scrub(text: str, secrets: Iterable[str]) -> str:
    """``text`` without any of ``secrets`` (nor their lines' pieces) or URL userinfo."""
    for secret in secrets:
        for piece in {secret, secret.strip(), *secret.split()}:
            if len(piece) >= 4:
                text = text.replace(piece, "<hidden>")
    return USERINFO.sub("", text)


def reason(exc: BaseException) -> str:
    """The socket's own words (``[Errno 111] Connection refused``) rather than urllib3's nested retelling."""
    found = ERRNO.search(str(exc))
    if found is not None:
        return found.group(0).strip()
    if isinstance(exc, requests.exceptions.InvalidHeader | requests.exceptions.InvalidURL):
        return f"{type(exc).__name__} (its text may hold a credential: not printed)"
    text = str(exc).strip()
    return shorten(text.splitlines()[0] if text else type(exc).__name__)


def shorten(text: str) -> str:
    """One line of at most MESSAGE_CHARS printable characters (pwdeploy.text's rule)."""
    return one_line(text, MESSAGE_CHARS)


def _text(value: Any) -> str:
    return shorten(value) if isinstance(value, str) else ""


def _mib(size: int) -> str:
    return f"{size // (1024 * 1024)} MiB"
