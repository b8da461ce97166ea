"""Shared fixtures. Goldens are refreshed only with `pytest --update-goldens`."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from pathlib import Path

import pytest
from click.testing import CliRunner

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"

# Keep the schema cache (and anything else written under the user's cache folder) out of the home directory,
# for this process and every pwdeploy process the tests start.
os.environ["XDG_CACHE_HOME"] = _CACHE = tempfile.mkdtemp(prefix="pwdeploy-test-cache-")
atexit.register(shutil.rmtree, _CACHE, ignore_errors=True)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--update-goldens", action="store_true", default=False,
        help="Rewrite golden manifests (tests/golden, manifests/) from the current renderer.",
    )  # fmt: skip


@pytest.fixture
def update_goldens(request: pytest.FixtureRequest) -> bool:
    return bool(request.config.getoption("--update-goldens"))


@pytest.fixture
def runner() -> CliRunner:
    return CliRunner()


@pytest.fixture
def jax_version(monkeypatch: pytest.MonkeyPatch) -> str:
    """Pin the 'installed jax' seen by the config, so tests do not depend on what pip installed."""
    import pwdeploy.config

    monkeypatch.setattr(pwdeploy.config, "installed_jax_version", lambda: "0.10.2")
    return "0.10.2"
