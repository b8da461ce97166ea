"""Files the tests read from the ``shared`` folder beside the checkout (the package itself never reads it).

A missing file fails the test in CI (CI=true), where the folder must be there, and skips it elsewhere with the
path in the reason (tests/services.py, the rule for every service a test needs).
"""

from __future__ import annotations

from pathlib import Path

from tests.services import unavailable

SHARED = Path(__file__).resolve().parents[2] / "shared"


def shared_file(*parts: str) -> Path:
    """``SHARED/<parts>``; fails (CI) or skips (elsewhere) the calling test when it does not exist."""
    path = SHARED.joinpath(*parts)
    if not path.is_file():
        unavailable(f"{path} not found (the shared folder beside the checkout)")
    return path
