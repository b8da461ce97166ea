"""Config checks that join several fields: the name bound, pinned Pathways releases, build repositories."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from pwdeploy.config import load_job
from pwdeploy.errors import ConfigError, ConfigErrors
from tests.conftest import REPO

EXAMPLE = REPO / "examples" / "data_parallel" / "job.yaml"
SERVER = "us-docker.pkg.dev/cloud-tpu-v2-images/pathways/server"


def errors(overrides: dict[str, Any], path: Path | None = EXAMPLE) -> list[str]:
    try:
        load_job(path, overrides, installed_jax=lambda: "0.10.2")
    except ConfigErrors as exc:
        return [str(e) for e in exc.errors]
    except ConfigError as exc:
        return [str(exc)]
    return []


def test_a_missing_name_is_reported_as_required_not_as_a_crash(tmp_path: Path) -> None:
    config = tmp_path / "job.yaml"
    config.write_text(EXAMPLE.read_text(encoding="utf-8").replace("name: dp-example\n", ""), encoding="utf-8")
    found = errors({}, config)
    assert len(found) == 1 and found[0].startswith("name: is required")


def test_a_pinned_release_of_another_jax_is_refused_unless_allowed() -> None:
    found = errors({"images.server": f"{SERVER}:20260730-jax_0.9.2"})
    assert len(found) == 1 and found[0].startswith("images.server: ") and "for jax 0.9.2" in found[0]
    assert "pathways_version is 0.10.2" in found[0]
    old_style = errors({"images.proxy_server": f"{SERVER.replace('server', 'proxy_server')}:jax-0.9.0"})
    assert len(old_style) == 1 and old_style[0].startswith("images.proxy_server: ")
    assert errors({"images.server": f"{SERVER}:20260730-jax_0.10.2"}) == []
    assert errors({"images.server": f"{SERVER}@sha256:" + "a" * 64}) == []  # a digest names no version
    mismatch = {"images.server": f"{SERVER}:20260730-jax_0.9.2", "allow_version_mismatch": True}
    assert errors(mismatch) == []


@pytest.mark.parametrize(
    ("field", "value", "problem"),
    [
        ("image.repository", "x y", "is not a Docker repository"),
        ("image.repository", "reg.io/team/job:1", "has a tag or digest"),
        ("sidecar.repository", "host_name.io/x", "is not a Docker repository"),
        ("sidecar.repository", "reg.io/x@sha256:" + "b" * 64, "has a tag or digest"),
    ],
)
def test_build_repositories_are_checked_with_the_config(field: str, value: str, problem: str) -> None:
    found = errors({field: value})
    assert len(found) == 1 and found[0].startswith(f"{field}: ") and problem in found[0]


def test_a_good_build_repository_passes() -> None:
    assert errors({"image.repository": "us-docker.pkg.dev/p/r/job", "sidecar.repository": "127.0.0.1:5000/sc"}) == []
