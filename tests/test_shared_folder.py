"""Tests that need the shared folder fail in CI and skip elsewhere when a file is missing."""

from __future__ import annotations

import pytest

from tests.shared_folder import shared_file


@pytest.mark.parametrize(("ci", "outcome"), [("true", pytest.fail.Exception), ("", pytest.skip.Exception)])
def test_a_missing_shared_file(monkeypatch: pytest.MonkeyPatch, ci: str, outcome: type[BaseException]) -> None:
    monkeypatch.setenv("CI", ci)
    with pytest.raises(outcome, match=r"no-such-file\.yaml not found \(the shared folder beside the checkout\)"):
        shared_file("schemas", "no-such-file.yaml")


def test_a_present_shared_file_is_returned() -> None:
    path = shared_file("schemas", "jobset-v0.12.0-crd.yaml")
    assert path.read_text(encoding="utf-8").startswith(("apiVersion", "---", "#"))
