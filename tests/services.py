"""The one rule for a service a test needs (the GCS emulator, a Docker engine and registry): when it is missing,
the test fails in CI (CI=true), where every service must be there, and skips with the reason everywhere else, so a
missing service never lets a run pass silently.
"""

from __future__ import annotations

import os
from typing import NoReturn

import pytest


def in_ci() -> bool:
    """Whether this run is CI's (CI=true, as CI services set it; CI=1 too)."""
    return os.environ.get("CI", "").lower() in ("true", "1")


def unavailable(reason: str) -> NoReturn:
    """Fail (CI) or skip (elsewhere) the calling test, fixture or module, saying ``reason``."""
    if in_ci():
        pytest.fail(f"CI=true but {reason}", pytrace=False)
    pytest.skip(reason, allow_module_level=True)
