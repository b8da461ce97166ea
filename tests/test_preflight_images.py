"""Image rows of preflight against the local registry on 127.0.0.1:5000, with images pushed by the Docker engine.

The images are tiny: one file imported with `docker import` (nothing can be pulled here), pushed under a fresh
repository name per test session. A closed port stands in for a registry that is down. The row wording that needs
no registry (fixes for Google's registries, tag samples, fields) is tested with a stub lookup.
"""

from __future__ import annotations

import io
import json
import tarfile
import uuid
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from pwdeploy.cli import cli
from pwdeploy.config import JobConfig, load_job
from pwdeploy.errors import ConfigError
from pwdeploy.gcs.storage_client import MissingCredentials
from pwdeploy.imageref import ImageRef
from pwdeploy.preflight import run_preflight
from pwdeploy.preflight.image_checks import check_image, check_images, job_images
from pwdeploy.registry.client import Lookup, RegistryClient
from pwdeploy.registry.credentials import Credentials
from pwdeploy.report import PreflightRow, Status
from tests import gcs_emulator as emulator
from tests.gcs_emulator import GcsEmulator, free_port
from tests.test_sidecar_engine import REGISTRY, _docker, docker_env

__all__ = ["docker_env"]  # the engine fixture, shared with the sidecar tests
gcs_emulator = emulator.gcs_emulator
emulator_env = emulator.emulator_env


def push_image(env: dict[str, str], repository: str, tag: str) -> str:
    """Import a one-file image, push it to the local registry, return its repository digest (sha256:...)."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        data = f"{repository}:{tag} {uuid.uuid4()}\n".encode()
        info = tarfile.TarInfo("marker.txt")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    image = f"{REGISTRY}/{repository}:{tag}"
    _docker(env, "import", "-", image, stdin=out.getvalue())
    _docker(env, "push", image)
    digests = json.loads(_docker(env, "image", "inspect", "--format", "{{json .RepoDigests}}", image))
    return str(next(d for d in digests if d.startswith(f"{REGISTRY}/{repository}@")).split("@", 1)[1])


@pytest.fixture(scope="module")
def pushed(docker_env: dict[str, str]) -> dict[str, str]:
    """Four images in a fresh repository tree: image reference -> digest."""
    root = f"pwdeploy-test/preflight-{uuid.uuid4().hex[:8]}"
    names = [
        ("server", "20260730-jax_0.10.2"),
        ("proxy_server", "20260730-jax_0.10.2"),
        ("app", "v1"),
        ("sidecar", "v1"),
    ]
    return {f"{REGISTRY}/{root}/{name}:{tag}": push_image(docker_env, f"{root}/{name}", tag) for name, tag in names}


@pytest.fixture
def lookup(tmp_path: Path) -> Any:
    """The real client with an empty docker config: no credentials but what a registry would ask for."""
    return RegistryClient(Credentials(tmp_path, helper_path="", google_token=lambda: None).for_registry).lookup


def job_with(images: list[str]) -> JobConfig:
    server, proxy, main, sidecar = images
    values = {
        "name": "pf",
        "tpu.type": "v5p-8",
        "main.image": main,
        "main.command": "python3 t.py",
        "storage.scratch": "gs://bkt/s",
        "images.server": server,
        "images.proxy_server": proxy,
        "sidecar.image": sidecar,
    }
    return load_job(None, values, installed_jax=lambda: "0.10.2")


@pytest.mark.docker
def test_pushed_image_is_ok_with_its_digest(pushed: dict[str, str], lookup: Any) -> None:
    image, digest = next(iter(pushed.items()))
    row = check_image(image, ("images.server",), lookup)
    assert (row.where, row.fields, row.id, row.status) == (image, ("images.server",), "image", Status.OK)
    assert row.message == f"exists, digest {digest} (asked anonymously)" and row.fix == ""
    by_digest = image.rsplit(":", 1)[0] + f"@{digest}"
    assert check_image(by_digest, ("main.image",), lookup).status is Status.OK


@pytest.mark.docker
def test_missing_tag_fails_and_names_the_tags_there(pushed: dict[str, str], lookup: Any) -> None:
    image = next(iter(pushed))
    repository = image.rsplit(":", 1)[0]
    row = check_image(f"{repository}:20260101-jax_0.10.2", ("images.server",), lookup)
    assert row.status is Status.FAILED
    assert row.message == (
        f"tag '20260101-jax_0.10.2' is not in {repository}; it has 1 tag(s); for jax 0.10.2: 20260730-jax_0.10.2 "
        "(asked anonymously)"
    )
    assert row.fix == "pin an existing one with --server-image (images.server)"
    missing_digest = check_image(f"{repository}@sha256:{'0' * 64}", ("main.image",), lookup)
    assert missing_digest.status is Status.FAILED and missing_digest.message.startswith("digest sha256:000")


@pytest.mark.docker
def test_missing_repository_fails(pushed: dict[str, str], lookup: Any) -> None:
    image = f"{REGISTRY}/pwdeploy-test/no-such-{uuid.uuid4().hex[:8]}:v1"
    row = check_image(image, ("sidecar.image",), lookup)
    assert row.status is Status.FAILED
    assert row.message == f"repository {image.rsplit(':', 1)[0]} does not exist (asked anonymously)"
    assert row.fix == "push it: pwdeploy sidecar build --push (or correct sidecar.image)"


def test_registry_down_is_not_verified_never_ok(lookup: Any) -> None:
    image = f"127.0.0.1:{free_port()}/team/app:v1"
    row = check_image(image, ("main.image",), lookup)
    assert row.status is Status.NOT_VERIFIED
    assert row.message.endswith("[Errno 111] Connection refused") and row.fix == f"check network access to {image[:15]}"


@pytest.mark.docker
def test_every_image_of_the_job_gets_a_row(pushed: dict[str, str], lookup: Any) -> None:
    images = list(pushed)
    rows = check_images(job_with(images), lookup)
    assert [(r.where, r.fields, r.status) for r in rows] == [
        (images[1], ("images.proxy_server",), Status.OK),
        (images[0], ("images.server",), Status.OK),
        (images[2], ("main.image",), Status.OK),
        (images[3], ("sidecar.image",), Status.OK),
    ]
    assert [r.message for r in rows] == [
        f"exists, digest {pushed[images[i]]} (asked anonymously)" for i in (1, 0, 2, 3)
    ]


@pytest.mark.docker
@pytest.mark.gcs
def test_cli_preflight_json_has_image_rows(
    pushed: dict[str, str], emulator_env: GcsEmulator, runner: CliRunner, tmp_path: Path
) -> None:
    server, proxy, main, sidecar = pushed
    bucket = emulator_env.create_bucket()
    flags = [
        "preflight",
        "-o",
        "json",
        "--name",
        "pf",
        "--tpu-type",
        "v5p-8",
        "--command",
        "python3 t.py",
        "--pathways-version",
        "0.10.2",
        "--allow-version-mismatch",
        "--gcs-scratch",
        f"gs://{bucket}/s",
        "--server-image",
        server,
        "--proxy-server-image",
        proxy,
        "--sidecar-image",
        sidecar,
    ]
    env = {"DOCKER_CONFIG": str(tmp_path)}
    good = runner.invoke(cli, [*flags, "--image", main], env=env)
    assert good.exit_code == 0, good.output
    checks = [c for c in json.loads(good.stdout)["checks"] if c["check"] == "image"]
    assert [(c["location"], c["fields"], c["status"]) for c in checks] == [
        (proxy, ["images.proxy_server"], "ok"),
        (server, ["images.server"], "ok"),
        (main, ["main.image"], "ok"),
        (sidecar, ["sidecar.image"], "ok"),
    ]
    assert checks[2]["detail"] == f"exists, digest {pushed[main]} (asked anonymously)" and checks[2]["fix"] is None

    missing = main.rsplit(":", 1)[0] + ":v2"
    bad = runner.invoke(cli, [*flags, "--image", missing], env=env)
    assert bad.exit_code == 6, bad.output
    data = json.loads(bad.stdout)
    (row,) = [c for c in data["checks"] if c["location"] == missing]
    assert (row["status"], row["fields"], data["failed"], data["summary"]["failed"]) == (
        "failed",
        ["main.image"],
        True,
        1,
    )
    assert "1 preflight check(s) failed" in bad.stderr


# ------------------------------------------------------------------------------------------ no registry needed


PATHWAYS = "us-docker.pkg.dev/cloud-tpu-v2-images/pathways"


def stub_lookup(answers: dict[str, Lookup]) -> Any:
    def lookup(ref: ImageRef) -> Lookup:
        return answers[ref.name]

    return lookup


def test_stub_lookup_derived_pathways_image_missing_says_how_to_list_and_pin(jax_version: str) -> None:
    job = load_job(None, {"name": "pf", "tpu.type": "v5p-8", "headless": True, "storage.scratch": "gs://bkt/s"})
    assert job_images(job) == {
        "us-docker.pkg.dev/cloud-tpu-v2-images/pathways/proxy_server:20261001-jax_0.10.2": ("images.proxy_server",),
        "us-docker.pkg.dev/cloud-tpu-v2-images/pathways/server:20261001-jax_0.10.2": ("images.server",),
    }  # headless: no main image; the newest release seen for jax 0.10.2 (pwdeploy.releases)
    tags = ("20260730-jax_0.10.2", "20260601-jax_0.10.1", "20260801-jax_0.10.2", "jax-0.9.2")
    server = "us-docker.pkg.dev/cloud-tpu-v2-images/pathways/server"
    answers = {
        server: Lookup("manifest_unknown", f"tag '20261001-jax_0.10.2' is not in {server}", tags),
        server.replace("server", "proxy_server"): Lookup("denied", "us-docker.pkg.dev refused access anonymously"),
    }
    proxy_row, server_row = check_images(job, stub_lookup(answers))
    assert server_row.status is Status.FAILED
    assert server_row.message.endswith(
        "it has 4 tag(s); for jax 0.10.2: 20260730-jax_0.10.2, 20260801-jax_0.10.2 (asked anonymously)"
    )
    assert server_row.fix == (
        f"list the tags: gcloud artifacts docker tags list {server}; "
        "pin an existing one with --server-image (images.server)"
    )
    assert proxy_row.status is Status.NOT_VERIFIED
    assert proxy_row.fix is not None and proxy_row.fix.startswith("gcloud auth configure-docker us-docker.pkg.dev")


def test_a_jax_without_a_release_there_names_the_nearest_releases_against_a_stub_lookup() -> None:
    server = "us-docker.pkg.dev/cloud-tpu-v2-images/pathways/server"
    tags = ("20260901-jax_0.11.1", "20260911-jax_0.11.0", "20261001-jax_0.10.2", "20260730-jax_0.10.2", "latest")
    lookup = stub_lookup({server: Lookup("manifest_unknown", f"tag 'jax-0.11.2' is not in {server}", tags)})
    row = check_image(f"{server}:jax-0.11.2", ("images.server",), lookup)
    assert row.status is Status.FAILED
    assert "it has 5 tag(s), none for jax 0.11.2; nearest: jax 0.11.1: 20260901-jax_0.11.1; jax 0.11.0: " in row.message


def test_stub_lookup_same_image_in_two_fields_is_one_row_and_bad_references_fail(jax_version: str) -> None:
    same = "127.0.0.1:5000/team/pw:1"
    values = {
        "name": "pf",
        "tpu.type": "v5p-8",
        "main.image": "r/i:1",
        "main.command": "x",
        "storage.scratch": "gs://bkt/s",
        "images.server": same,
        "images.proxy_server": same,
    }
    with pytest.raises(ConfigError, match=r"main\.image: 'Bad/Ref:1' is not an image reference"):
        load_job(None, {**values, "main.image": "Bad/Ref:1"})  # the config refuses it ...
    job = load_job(None, values)
    job = job._replace(main=job.main._replace(image="Bad/Ref:1"))  # ... a reference from elsewhere is a row
    rows = check_images(job, stub_lookup({"127.0.0.1:5000/team/pw": Lookup("found", "sha256:" + "1" * 64)}))
    assert [(r.where, r.fields, r.status) for r in rows] == [
        (same, ("images.proxy_server", "images.server"), Status.OK),
        ("Bad/Ref:1", ("main.image",), Status.FAILED),
    ]
    assert rows[1].message.startswith("not an image reference: 'Bad' is not a valid repository path component")


def test_stub_lookup_hlo_uploader_image_is_checked_with_an_hlo_dump(jax_version: str) -> None:
    values = {"name": "pf", "tpu.type": "v5p-8", "headless": True, "storage.scratch": "gs://bkt/s"}
    assert "google/cloud-sdk:502.0.0-slim" not in job_images(load_job(None, values))
    uploader = "127.0.0.1:5000/team/cloud-sdk:1"
    job = load_job(None, {**values, "storage.hlo_dump": "gs://bkt/hlo", "storage.hlo_uploader_image": uploader})
    assert job_images(job)[uploader] == ("storage.hlo_uploader_image",)
    answers = {
        "127.0.0.1:5000/team/cloud-sdk": Lookup(
            "name_unknown", "repository 127.0.0.1:5000/team/cloud-sdk does not exist"
        )
    }
    found = {
        ref: Lookup("found", "sha256:" + "3" * 64)
        for ref in (
            "us-docker.pkg.dev/cloud-tpu-v2-images/pathways/proxy_server",
            "us-docker.pkg.dev/cloud-tpu-v2-images/pathways/server",
        )
    }
    *servers, row = check_images(job, stub_lookup({**answers, **found}))
    assert [r.status for r in servers] == [Status.OK, Status.OK]
    assert (row.where, row.fields, row.status) == (uploader, ("storage.hlo_uploader_image",), Status.FAILED)
    assert row.fix == "set --hlo-uploader-image (storage.hlo_uploader_image) to an existing image that has gcloud"


def test_stub_lookup_image_repository_without_a_pushed_image_fails(jax_version: str, tmp_path: Path) -> None:
    """image.repository set and no pushed image recorded: main.image stays unset after pinning (render would stop);
    preflight fails a row naming the repository, beside the other images."""
    from pwdeploy.images.pin import pin_pushed

    values = {
        "name": "pf",
        "tpu.type": "v5p-8",
        "main.command": "python3 t.py",
        "storage.scratch": "gs://bkt/s",
        "image.repository": "127.0.0.1:5000/team/jobs",
    }
    config = tmp_path / "job.yaml"
    config.write_text("name: pf\n", encoding="utf-8")  # the lock would sit beside it; none was written
    job, warnings = pin_pushed(load_job(None, values), config)
    assert job.main.image is None and warnings == []
    rows = check_images(job, lambda ref: Lookup("found", "sha256:" + "4" * 64))
    assert [(r.where, r.fields, r.status) for r in rows] == [
        (
            "us-docker.pkg.dev/cloud-tpu-v2-images/pathways/proxy_server:20261001-jax_0.10.2",
            ("images.proxy_server",),
            Status.OK,
        ),
        ("us-docker.pkg.dev/cloud-tpu-v2-images/pathways/server:20261001-jax_0.10.2", ("images.server",), Status.OK),
        ("127.0.0.1:5000/team/jobs", ("image.repository",), Status.FAILED),
    ]
    assert rows[-1].message == "no pushed job image matches the current inputs"
    assert rows[-1].fix == "pwdeploy image build --push, or set main.image"
    headless = check_images(job._replace(headless=True), lambda ref: Lookup("found", "sha256:" + "4" * 64))
    assert [r.fields for r in headless] == [("images.proxy_server",), ("images.server",)]  # no main container


def test_stub_lookup_rows_join_gcs_rows_and_a_further_source_slots_in(jax_version: str) -> None:
    def no_credentials() -> Any:
        raise MissingCredentials("none here")

    job = load_job(None, {"name": "pf", "tpu.type": "v5p-8", "headless": True, "storage.scratch": "gs://bkt/s"})
    further = PreflightRow("cluster", Status.WARN, "cluster", "a further source")
    report = run_preflight(
        job,
        client_factory=no_credentials,
        image_lookup=lambda ref: Lookup("found", "sha256:" + "2" * 64),
        extra_sources=[lambda: [further]],
    )
    assert [(r.id, r.status) for r in report.results] == [
        ("cluster", Status.WARN),
        ("credentials", Status.FAILED),
        ("image", Status.OK),
        ("image", Status.OK),
    ]
    assert report.as_json()["summary"] == {"ok": 2, "warn": 1, "failed": 1, "not verified": 0}
    assert any("node pool's service account" in note for note in report.notes)
    no_gcs = run_preflight(
        job,
        client_factory=no_credentials,
        image_lookup=lambda ref: Lookup("found", "sha256:" + "2" * 64),
        check_gcs=False,
        extra_sources=[lambda: [further]],
    )
    assert [r.id for r in no_gcs.results] == ["cluster", "image", "image"]


def test_stub_lookup_sources_run_side_by_side(jax_version: str) -> None:
    """A further source (the cluster) and the image lookups overlap: each waits at a barrier that opens only
    when all three are in flight at once (one after another, the first would wait in vain)."""
    import threading

    together = threading.Barrier(3)
    met: list[str] = []

    def meet(who: str) -> None:
        together.wait(timeout=20)
        met.append(who)

    def lookup(ref: ImageRef) -> Lookup:
        meet("image")
        return Lookup("found", "sha256:" + "5" * 64)

    def source() -> list[PreflightRow]:
        meet("cluster")
        return [PreflightRow("cluster", Status.OK, "cluster", "a further source")]

    job = load_job(None, {"name": "pf", "tpu.type": "v5p-8", "headless": True, "storage.scratch": "gs://bkt/s"})
    report = run_preflight(job, image_lookup=lookup, check_gcs=False, extra_sources=[source])
    assert [r.id for r in report.results] == ["cluster", "image", "image"]
    assert sorted(met) == ["cluster", "image", "image"], "the sources ran one after another"
