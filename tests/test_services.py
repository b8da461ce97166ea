"""A missing service (the GCS emulator, a Docker engine) fails the test in CI and skips it
elsewhere, the same way in every file."""

from __future__ import annotations

import pytest

from tests.services import unavailable

OUTCOMES = [("true", pytest.fail.Exception), ("1", pytest.fail.Exception), ("", pytest.skip.Exception)]


@pytest.mark.parametrize(("ci", "outcome"), OUTCOMES)
def test_a_missing_service(monkeypatch: pytest.MonkeyPatch, ci: str, outcome: type[BaseException]) -> None:
    monkeypatch.setenv("CI", ci)
    with pytest.raises(outcome) as caught:
        unavailable("GCS emulator unavailable: it did not start")
    expected = "GCS emulator unavailable: it did not start"
    assert str(caught.value) == (f"CI=true but {expected}" if ci else expected)
