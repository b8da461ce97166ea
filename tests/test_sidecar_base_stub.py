"""`sidecar build` asks the registry for its base before building (preflight's check, here against the loopback
stub registry of test_registry_stub or a scripted lookup), and lists the releases there are when it is missing.
The engine is test_sidecar's stand-in: nothing here needs docker."""

from __future__ import annotations

from pathlib import Path

import pytest

from pwdeploy.errors import ConfigError
from pwdeploy.imageref import ImageRef
from pwdeploy.images import sidecar_image as spec
from pwdeploy.images.base_check import SHOWN_TAGS
from pwdeploy.registry.client import Lookup
from tests.test_registry_stub import StubRegistry, found, stub
from tests.test_sidecar import PY, Recorder, StandInEngine, job_at, write_job

__all__ = ["stub"]  # the fixture

DEFAULT_BASE = "us-docker.pkg.dev/cloud-tpu-v2-images/pathways-colocated-python/sidecar"


def released(*tags: str) -> Lookup:
    return Lookup("manifest_unknown", "tag is not there", tags)


def test_a_missing_release_lists_the_releases_for_this_jax_and_python(tmp_path: Path) -> None:
    job = job_at(write_job(tmp_path, {"repository": "r.example/sc", "base_release": "20260101", "python_version": PY}))
    other = "3.9" if PY != "3.9" else "3.10"
    dates = [f"2026{month:02d}01" for month in range(1, 13)]
    tags = (
        *(f"{date}-python_{PY}-jax_0.10.2" for date in dates),
        f"20261201-python_{other}-jax_0.10.2",
        f"20261201-python_{PY}-jax_0.9.2",
        "latest",
    )
    asked: list[ImageRef] = []

    def lookup(ref: ImageRef) -> Lookup:
        asked.append(ref)
        return released(*tags)

    engine = StandInEngine()
    with pytest.raises(ConfigError) as caught:
        spec.build(job, engine, Recorder(), base_lookup=lookup)
    assert [ref.name for ref in asked] == [DEFAULT_BASE]
    error = caught.value
    assert error.field == "sidecar.base_release"
    newest = ", ".join(f"{date}-python_{PY}-jax_0.10.2" for date in reversed(dates[-SHOWN_TAGS:]))
    assert error.message == (
        f"the sidecar base {DEFAULT_BASE}:20260101-python_{PY}-jax_0.10.2 does not exist: tag is not there; "
        f"tags there for jax 0.10.2: {newest} (and {12 - SHOWN_TAGS} more)"
    )
    assert error.hint is not None and "set sidecar.base_release (--sidecar-base-release)" in error.hint
    assert engine.labels == {}, "nothing was built"


def test_no_release_for_this_jax_says_so(tmp_path: Path) -> None:
    job = job_at(write_job(tmp_path, {"repository": "r.example/sc", "base_release": "20260101", "python_version": PY}))
    with pytest.raises(ConfigError, match=r"it has 2 tag\(s\), none for jax 0\.10\.2\n  hint: list the tags"):
        spec.build(job, StandInEngine(), Recorder(), base_lookup=lambda ref: released("a", f"x-python_{PY}-jax_0.9"))


def test_stub_registry_without_the_base_stops_the_build(stub: StubRegistry, tmp_path: Path) -> None:
    """The real client against the loopback stub: the base_image's tag is missing, its repository lists others."""
    base = f"{stub.host}/team/sidecar:20260101-python_{PY}-jax_0.10.2"
    stub.routes[("HEAD", f"/v2/team/sidecar/manifests/20260101-python_{PY}-jax_0.10.2")] = lambda s: (404, {}, b"")
    tags = f'{{"tags": ["20260301-python_{PY}-jax_0.10.2", "20260201-python_{PY}-jax_0.10.2"]}}'.encode()
    stub.routes[("GET", "/v2/team/sidecar/tags/list")] = lambda s: (200, {}, tags)
    job = job_at(write_job(tmp_path, {"repository": "r.example/sc", "base_image": base}))
    with pytest.raises(ConfigError) as caught:
        spec.build(job, StandInEngine(), Recorder())
    assert caught.value.field == "sidecar.base_image"
    assert caught.value.message.endswith(
        f"tags there for jax 0.10.2: 20260301-python_{PY}-jax_0.10.2, 20260201-python_{PY}-jax_0.10.2"
    )
    assert caught.value.hint is not None and "set sidecar.base_image to one of them" in caught.value.hint


def test_stub_registry_with_the_base_builds(stub: StubRegistry, tmp_path: Path) -> None:
    base = f"{stub.host}/team/sidecar:20260101-python_{PY}-jax_0.10.2"
    stub.routes[("HEAD", f"/v2/team/sidecar/manifests/20260101-python_{PY}-jax_0.10.2")] = found
    job = job_at(write_job(tmp_path, {"repository": "r.example/sc", "base_image": base}))
    result = spec.build(job, StandInEngine(), Recorder())
    assert result.built and result.warnings == ()


def test_no_answer_is_a_warning_and_the_build_goes_on(tmp_path: Path) -> None:
    job = job_at(write_job(tmp_path, {"repository": "r.example/sc", "base_release": "20260101", "python_version": PY}))
    result = spec.build(
        job, StandInEngine(), Recorder(), base_lookup=lambda ref: Lookup("unreachable", "no route to host")
    )
    assert result.built
    assert result.warnings == (
        f"could not check that the sidecar base {DEFAULT_BASE}:20260101-python_{PY}-jax_0.10.2 exists (no route to "
        "host); building anyway",
    )


def test_a_base_the_engine_has_and_an_up_to_date_image_are_not_asked_for(tmp_path: Path) -> None:
    job = job_at(write_job(tmp_path, {"repository": "r.example/sc", "base_release": "20260101", "python_version": PY}))

    def never(ref: ImageRef) -> Lookup:
        raise AssertionError("the registry must not be asked")

    engine = StandInEngine()
    engine.labels[f"{DEFAULT_BASE}:20260101-python_{PY}-jax_0.10.2"] = {}
    assert spec.build(job, engine, Recorder(), base_lookup=never).built
    assert not spec.build(job, engine, Recorder(), base_lookup=never).built  # up to date: no build, no base
