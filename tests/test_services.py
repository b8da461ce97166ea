"""A missing service (the shared folder, the GCS emulator, a Docker engine) fails the test in CI and skips it
elsewhere, the same way in every file."""

from __future__ import annotations

import pytest

from tests.services import unavailable
from tests.shared_folder import shared_file

OUTCOMES = [("true", pytest.fail.Exception), ("1", pytest.fail.Exception), ("", pytest.skip.Exception)]


@pytest.mark.parametrize(("ci", "outcome"), OUTCOMES)
def test_a_missing_service(monkeypatch: pytest.MonkeyPatch, ci: str, outcome: type[BaseException]) -> None:
    monkeypatch.setenv("CI", ci)
    with pytest.raises(outcome) as caught:
        unavailable("GCS emulator unavailable: it did not start")
    expected = "GCS emulator unavailable: it did not start"
    assert str(caught.value) == (f"CI=true but {expected}" if ci else expected)


@pytest.mark.parametrize(("ci", "outcome"), OUTCOMES)
def test_a_missing_shared_file(monkeypatch: pytest.MonkeyPatch, ci: str, outcome: type[BaseException]) -> None:
    monkeypatch.setenv("CI", ci)
    with pytest.raises(outcome, match=r"no-such-file\.yaml not found \(the shared folder beside the checkout\)"):
        shared_file("schemas", "no-such-file.yaml")


def test_a_present_shared_file_is_returned() -> None:
    path = shared_file("schemas", "jobset-v0.12.0-crd.yaml")
    assert path.read_text(encoding="utf-8").startswith(("apiVersion", "---", "#"))
