"""parse_reference reads references with string methods; the grammar as one regular expression (REFERENCE_PATTERN,
which the config's JSON Schema carries) is the oracle: both must find the same host, path, tag and digest in any
text, and refuse the same texts."""

from __future__ import annotations

import re

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from pwdeploy.imageref import REFERENCE_PATTERN, BadReference, _split, is_digest, parse_reference

ORACLE = re.compile(REFERENCE_PATTERN)
SHA256 = "sha256:" + "0123456789abcdef" * 4

# Pieces a reference is made of, right and wrong, so random texts land near the grammar's edges.
PIECES = [
    *"abcz09AZ._-:/@[]",
    "__",
    "___",
    "--",
    "..",
    "localhost",
    "LOCALHOST",
    "reg.io",
    "host_name.io",
    "us-docker.pkg.dev",
    "-x",
    "x-",
    ":5000",
    ":",
    "[::1]",
    "[fe80::1]",
    "[::g]",
    "[]",
    "sha256:",
    SHA256,
    "sha512:" + "ab" * 64,
    "SHA256:" + "0" * 64,
    "sha256:" + "A" * 64,
    "sha256:" + "0" * 63,
    "v1.0",
    "_tag",
    ".tag",
    "T" * 128,
    "ü",
    "٣",  # a digit that is not ASCII
    "\n",
    " ",
]


def oracle(text: str) -> tuple[str | None, str, str | None, str | None] | None:
    match = ORACLE.fullmatch(text)
    return None if match is None else match.groups()  # type: ignore[return-value]


@settings(max_examples=3000, deadline=None)
@given(st.lists(st.sampled_from(PIECES), max_size=12).map("".join))
@example("python:3.11-slim")
@example("localhost/x")
@example("localhost:5000/a/b@" + SHA256)
@example("[::1]:5000/x:v")
@example("[::1]/x")
@example("[::1]x/y")
@example("reg.io:/x")
@example("reg.io:5000:1/x")
@example("a.b/c:d:e")
@example("a/b:c/d")
@example("LOCALHOST/x")
@example("localhostx/y")
@example("-reg.io/a")
@example("reg-.io/a")
@example("reg.-io/a")
@example("reg..io/a")
@example("x@")
@example("@" + SHA256)
@example("a" + "-" * 5 + "b")
@example("a._b")
@example("a__b/c_d")
@example("x:" + "T" * 129)
def test_the_parser_reads_what_the_grammar_reads(text: str) -> None:
    assert _split(text) == oracle(text)


@given(st.text(max_size=40))
def test_the_parser_agrees_with_the_grammar_on_any_text(text: str) -> None:
    assert _split(text) == oracle(text)


@pytest.mark.parametrize(
    "text",
    [SHA256, "sha512:" + "0" * 128, "sha256:" + "0" * 63, "sha256:" + "A" * 64, "md5:" + "0" * 32, "sha256", ""],
)
def test_is_digest_is_the_grammars_digest(text: str) -> None:
    assert is_digest(text) is (re.fullmatch(r"sha256:[a-f0-9]{64}|sha512:[a-f0-9]{128}", text) is not None)


def test_a_refused_reference_still_says_which_part_is_wrong() -> None:
    with pytest.raises(BadReference, match=re.escape("'host_name.io' is not a registry host")):
        parse_reference("host_name.io/x:1")
    with pytest.raises(BadReference, match=re.escape("'-x' is not a valid tag")):
        parse_reference("app:-x")
    assert parse_reference("python:3.11").name == "docker.io/library/python"
