"""The manifests' YAML writer against PyYAML with the dumper it stands in for, as the oracle: on random documents
built near YAML's edges (indicators, quotes, numbers and booleans as strings, literal blocks, nesting), the writer
gives PyYAML's text or leaves the document to PyYAML; on every rendered manifest it gives the text itself."""

from __future__ import annotations

from collections import OrderedDict, UserList
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import example, given, settings
from hypothesis import strategies as st

from pwdeploy import manifests
from pwdeploy.config import load_job
from pwdeploy.manifests.emit import block_yaml
from tests.conftest import REPO


def oracle(document: Any) -> str:
    return manifests._dump(document)


WORDS = st.sampled_from(
    [
        *"a-:#?,[]{}&*!|>'\"%@` .=~/\\\t\n",
        "yes",
        "No",
        "on",
        "OFF",
        "true",
        "null",
        "~",
        "Null",
        "0",
        "-1",
        "0x1f",
        "0o7",
        "1_000",
        "1.5",
        ".5",
        "1e3",
        ".inf",
        "-.Inf",
        ".nan",
        "2026-12-06",
        "2001-12-14t21:59:43.10-05:00",
        "<<",
        "=",
        "---",
        "...",
        "- x",
        "key: v",
        "a #b",
        "a#b",
        "http://x",
        "gs://b/p",
        "--flag=1",
        "metadata.labels['x']",
        "2x v5p-8 (tpuv5:2x2x1)",
        "é",
        "x" * 130,
        "  ",
        "\n\n",
    ]
)
TEXT = st.lists(WORDS, max_size=6).map("".join)
SCALARS = st.one_of(TEXT, st.integers(-(2**70), 2**70), st.booleans(), st.none(), st.floats(allow_nan=False))
DOCUMENTS = st.recursive(
    SCALARS,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(TEXT, inner, max_size=4)),
    max_leaves=24,
)
# What manifests hold (no floats, printable ASCII and line breaks), so most documents take the writer's own path.
MANIFEST_TEXT = TEXT.filter(lambda t: "\t" not in t and t.isascii() and len(t) < 100)
MANIFEST_DOCUMENTS = st.recursive(
    st.one_of(MANIFEST_TEXT, st.integers(-(2**70), 2**70), st.booleans(), st.none()),
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(MANIFEST_TEXT, inner, max_size=4)),
    max_leaves=24,
)


@settings(max_examples=1500, deadline=None)
@given(st.one_of(st.dictionaries(TEXT, DOCUMENTS, max_size=5), st.dictionaries(MANIFEST_TEXT, MANIFEST_DOCUMENTS)))
@example({"a": {"b": [{"c": "x\ny\n", "d": [["e", "f\n"], []]}, {}, [], "- x"]}})
@example({"k": "line one\n\nline three"})
@example({"k": " indented first\nline", "l": "\nx\n", "m": "x\n\n"})
@example({"k": ["a", ["b", ["c", {"d": "e\n"}]]]})
@example({"": "", "x": "'", "y": "a: b"})
def test_the_writer_gives_pyyamls_text_or_leaves_it_to_pyyaml(document: dict[str, Any]) -> None:
    written = block_yaml(document)
    if written is not None:
        assert written == oracle(document)


@given(DOCUMENTS.filter(lambda d: not isinstance(d, dict)))
def test_a_document_that_is_not_a_mapping_is_left_to_pyyaml(document: Any) -> None:
    assert block_yaml(document) is None


def test_what_the_safe_dumper_would_refuse_is_left_to_it() -> None:
    """A dict or list subclass, a tuple, a float: PyYAML's to represent or refuse, as before."""
    for value in (OrderedDict(b=1), UserList([1]), (1, 2), 1.5, b"x"):
        assert block_yaml({"a": value}) is None
        assert block_yaml({"a": [value]}) is None
    assert block_yaml(OrderedDict(a=1)) is None


@pytest.mark.parametrize("slices", [1, 2, 64])
def test_rendered_manifests_are_written_without_pyyaml_and_as_it_writes_them(slices: int) -> None:
    objects = manifests.build(load_job(REPO / "examples" / "data_parallel" / "job.yaml", {"tpu.slices": slices}))
    for obj in objects:
        assert block_yaml(obj) == oracle(obj)
    assert manifests.to_yaml(objects) == "---\n" + "---\n".join(oracle(obj) for obj in objects)


@pytest.mark.parametrize("golden", sorted((REPO / "tests" / "golden").glob("*.yaml")), ids=lambda p: p.stem)
def test_every_golden_manifest_is_written_without_pyyaml(golden: Path) -> None:
    """The goldens (every kind of job the renderer makes) hold nothing the writer leaves to PyYAML."""
    text = golden.read_text(encoding="utf-8")
    objects = [obj for obj in yaml.safe_load_all(text) if obj is not None]
    assert objects and all(block_yaml(obj) == oracle(obj) for obj in objects)
    assert manifests.to_yaml(objects) == text
