"""Files the tests read from the ``shared`` folder beside the checkout (the package itself never reads it).

A missing file fails the test in CI (CI=true), where the folder must be there, and skips it elsewhere with the
path in the reason, so a missing folder never passes silently.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

SHARED = Path(__file__).resolve().parents[2] / "shared"


def shared_file(*parts: str) -> Path:
    """``SHARED/<parts>``; fails (CI) or skips (elsewhere) the calling test when it does not exist."""
    path = SHARED.joinpath(*parts)
    if not path.is_file():
        reason = f"{path} not found (the shared folder beside the checkout)"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"CI=true but {reason}", pytrace=False)
        pytest.skip(reason)
    return path
