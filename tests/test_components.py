"""Per-component settings of the Pathways servers (proxy_env, rm_env, rm_flags, images.worker), the JobSet's
ttlSecondsAfterFinished, the warning about images of different Pathways releases, and both JAX lines (0.10 and
0.11) through the image defaults and the tag agreement check."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from pwdeploy import manifests, releases
from pwdeploy.advice import job_warnings
from pwdeploy.cli import cli
from pwdeploy.config import JobConfig, load_job
from pwdeploy.errors import ConfigError, ConfigErrors
from pwdeploy.images import job_image as image_spec
from pwdeploy.images import lock, pin
from tests.conftest import REPO
from tests.test_image import REPOSITORY as IMAGE_REPOSITORY
from tests.test_image import this_machine
from tests.test_image import write_job as image_job

BASE = {
    "name": "parts",
    "tpu.type": "v5p-16",
    "main.image": "r.example/p/img:1",
    "main.command": "python3 train.py",
    "storage.scratch": "gs://bucket/scratch",
}
REGISTRY = "us-docker.pkg.dev/cloud-tpu-v2-images/pathways"


def _job(overrides: dict[str, Any] | None = None, *, installed: str = "0.10.2") -> JobConfig:
    return load_job(None, {**BASE, **(overrides or {})}, installed_jax=lambda: installed)


def _pod(job: JobConfig, replicated_job: str) -> dict[str, Any]:
    (jobset,) = [o for o in manifests.build(job) if o["kind"] == "JobSet"]
    (found,) = [r for r in jobset["spec"]["replicatedJobs"] if r["name"] == replicated_job]
    spec: dict[str, Any] = found["template"]["spec"]["template"]["spec"]
    return spec


def _container(job: JobConfig, name: str) -> dict[str, Any]:
    pod = _pod(job, "worker" if name == "pathways-worker" else "pathways-head")
    (found,) = [c for c in pod.get("initContainers", []) + pod["containers"] if c["name"] == name]
    container: dict[str, Any] = found
    return container


def _env(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}


def test_proxy_and_rm_env_and_rm_flags_land_in_their_containers_only() -> None:
    job = _job({"proxy_env": {"GRPC_VERBOSITY": "debug"}, "rm_env": ["TPU_STDERR_LOG_LEVEL=0"], "rm_flags": "--v=1"})
    proxy, rm = _container(job, "pathways-proxy"), _container(job, "pathways-rm")
    worker, main = _container(job, "pathways-worker"), _container(job, "main")
    assert _env(proxy)["GRPC_VERBOSITY"] == "debug" and "GRPC_VERBOSITY" not in _env(rm)
    assert _env(rm)["TPU_STDERR_LOG_LEVEL"] == "0" and "TPU_STDERR_LOG_LEVEL" not in _env(proxy)
    assert rm["args"][-1] == "--v=1" and "--v=1" not in proxy["args"] + worker["args"]
    assert "GRPC_VERBOSITY" not in _env(main) and "GRPC_VERBOSITY" not in _env(worker)
    coordinator = "metadata.labels['jobset.sigs.k8s.io/coordinator']"
    assert _env(proxy)["PATHWAYS_HEAD"] == {"fieldRef": {"fieldPath": coordinator}}


@pytest.mark.parametrize(
    ("field", "value", "where", "named"),
    [
        ("rm_flags", ["--instance_count=4"], "rm_flags", "tpu.slices (--num-slices)"),
        ("rm_flags", ["--gcs_scratch_location=gs://other/x"], "rm_flags", "storage.scratch"),
        ("rm_flags", ["--enable_gcs_olm=false"], "rm_flags", "--no-gcs-olm"),
        ("rm_env", {"HOST_ADDRESS": "10.0.0.1"}, "rm_env.HOST_ADDRESS", "the head's address"),
        ("proxy_env", {"XLA_FLAGS": "--xla_dump_to=/tmp"}, "proxy_env.XLA_FLAGS", "--xla-flag"),
        ("proxy_env", {"PATHWAYS_HEAD": "x"}, "proxy_env.PATHWAYS_HEAD", "set by pwdeploy"),
    ],
)
def test_what_render_sets_itself_is_refused_naming_the_field_that_sets_it(
    field: str, value: Any, where: str, named: str
) -> None:
    with pytest.raises(ConfigError) as err:
        _job({field: value})
    assert err.value.field == where and named in str(err.value)


def test_every_refused_name_is_reported_at_once() -> None:
    with pytest.raises(ConfigErrors) as err:
        _job({"rm_flags": ["--node_type=worker", "--server_port=1"], "rm_env": {"JOBSET_NAME": "x"}})
    assert len(err.value.errors) == 3


@pytest.mark.parametrize(("field", "value"), [("rm_flags", ["-v 1"]), ("rm_env", {"1BAD": "x"}), ("proxy_env", 3)])
def test_malformed_values_are_refused_like_the_other_flag_and_env_fields(field: str, value: Any) -> None:
    with pytest.raises(ConfigError) as err:
        _job({field: value})
    assert str(err.value.field).startswith(field)


def test_the_worker_image_defaults_to_the_server_image_and_may_differ() -> None:
    server = f"{REGISTRY}/server:20260730-jax_0.10.2"
    job = _job({"images.server": server})
    assert _container(job, "pathways-worker")["image"] == server == _container(job, "pathways-rm")["image"]
    patched = "r.example/p/server-patched:20260730-jax_0.10.2"
    job = _job({"images.server": server, "images.worker": patched})
    assert _container(job, "pathways-worker")["image"] == patched
    assert _container(job, "pathways-rm")["image"] == server


def test_the_worker_image_is_pinned_and_agrees_with_the_jax_version() -> None:
    with pytest.raises(ConfigError) as err:
        _job({"images.worker": "r.example/p/server:latest"})
    assert err.value.field == "images.worker"
    with pytest.raises(ConfigError, match=r"release for jax 0\.9\.2") as err:
        _job({"images.worker": f"{REGISTRY}/server:20260101-jax_0.9.2"})
    assert err.value.field == "images.worker"


def test_ttl_after_finished_is_unset_by_default_and_rendered_when_set() -> None:
    def spec(job: JobConfig) -> dict[str, Any]:
        (jobset,) = [o for o in manifests.build(job) if o["kind"] == "JobSet"]
        found: dict[str, Any] = jobset["spec"]
        return found

    assert "ttlSecondsAfterFinished" not in spec(_job())
    assert spec(_job({"scheduling.ttl_after_finished": 3600}))["ttlSecondsAfterFinished"] == 3600
    assert spec(_job({"scheduling.ttl_after_finished": 0}))["ttlSecondsAfterFinished"] == 0  # delete at once
    with pytest.raises(ConfigError) as err:
        _job({"scheduling.ttl_after_finished": -1})
    assert err.value.field == "scheduling.ttl_after_finished"


def test_the_flags_set_the_new_fields(tmp_path: Any) -> None:
    result = CliRunner().invoke(
        cli,
        [
            "render", "--name", "parts", "--tpu-type", "v5p-16", "--image", "r.example/p/img:1", "--command",
            "python3 t.py", "--gcs-scratch", "gs://bucket/scratch", "--pathways-version", "0.10.2",
            "--allow-version-mismatch", "--proxy-env", "A=1", "--rm-env", "B=2", "--rm-flag", "--v=1",
            "--worker-image", "r.example/p/server:20260730-jax_0.10.2", "--ttl-after-finished", "600",
        ],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    for text in ("name: A", "name: B", "- --v=1", "image: r.example/p/server:20260730-jax_0.10.2"):
        assert text in result.stdout
    assert "ttlSecondsAfterFinished: 600" in result.stdout


def test_a_reserved_rm_flag_is_exit_2_without_a_traceback() -> None:
    result = CliRunner().invoke(
        cli,
        [
            "render", "--name", "parts", "--tpu-type", "v5p-16", "--image", "r.example/p/img:1", "--command",
            "python3 t.py", "--gcs-scratch", "gs://bucket/scratch", "--pathways-version", "0.10.2",
            "--allow-version-mismatch", "--rm-flag", "--instance_type=tpuv5:2x2x2",
        ],
    )  # fmt: skip
    assert result.exit_code == 2
    assert "rm_flags" in result.stderr and "Traceback" not in result.stderr and result.stdout == ""


# --------------------------------------------------------------------------------- releases of the images


def test_images_of_one_release_raise_no_warning() -> None:
    same = {
        "images.server": f"{REGISTRY}/server:20260730-jax_0.10.2",
        "images.proxy_server": f"{REGISTRY}/proxy_server:20260730-jax_0.10.2",
        "sidecar.image": "r.example/p/sidecar:3",  # the user's own tag: no release date to compare
    }
    assert job_warnings(_job(same)) == []
    assert job_warnings(_job()) == []  # jax-<V> defaults carry no date


def test_a_proxy_and_a_server_of_different_release_dates_are_a_warning() -> None:
    (warning,) = job_warnings(
        _job(
            {
                "images.server": f"{REGISTRY}/server:20260901-jax_0.10.2",
                "images.proxy_server": f"{REGISTRY}/proxy_server:20260730-jax_0.10.2",
            }
        )
    )
    assert "images.proxy_server 20260730" in warning and "images.server 20260901" in warning


def test_a_sidecar_base_of_another_release_is_a_warning() -> None:
    (warning,) = job_warnings(
        _job(
            {
                "images.server": f"{REGISTRY}/server:20260730-jax_0.10.2",
                "images.proxy_server": f"{REGISTRY}/proxy_server:20260730-jax_0.10.2",
                "sidecar.repository": "r.example/p/sidecar",
                "sidecar.base_image": "us-docker.pkg.dev/cloud-tpu-v2-images/pathways-colocated-python/sidecar:"
                "20260423-python_3.12-jax_0.10.2",
                "sidecar.python_version": "3.12",
                "image.base": "python:3.12-slim-bookworm",
            }
        )
    )
    assert "sidecar.base_image 20260423" in warning


# ---------------------------------------------------------------------------------------- both JAX lines


@pytest.mark.parametrize("version", ["0.10.2", "0.11.0"])
def test_each_jax_line_pins_its_own_pathways_images(version: str) -> None:
    job = _job(installed=version)
    assert job.pathways_version == version
    tag = releases.default_tag(version)  # the newest release seen for that jax: 20261001-jax_0.10.2, ...
    assert tag.endswith(f"jax_{version}")
    assert _container(job, "pathways-proxy")["image"] == f"{REGISTRY}/proxy_server:{tag}"
    assert _container(job, "pathways-worker")["image"] == f"{REGISTRY}/server:{tag}"
    dated = _job(
        {
            "images.server": f"{REGISTRY}/server:20261101-jax_{version}",
            "images.proxy_server": f"{REGISTRY}/proxy_server:20261101-jax_{version}",
        },
        installed=version,
    )
    assert _container(dated, "pathways-rm")["image"].endswith(f"20261101-jax_{version}")


@pytest.mark.parametrize(("installed", "other"), [("0.10.2", "0.11.0"), ("0.11.0", "0.10.2")])
def test_an_image_of_the_other_jax_line_is_refused(installed: str, other: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(f"release for jax {other}")) as err:
        _job({"images.server": f"{REGISTRY}/server:20261101-jax_{other}"}, installed=installed)
    assert err.value.field == "images.server"


@pytest.mark.parametrize(
    ("python", "allowed", "refused"),
    # 0.11.2 has no Pathways release seen (pwdeploy.releases): a fresh install must not resolve it.
    [
        ("3.11", ["0.10.0", "0.10.2"], ["0.11.0", "0.9.2"]),
        ("3.12", ["0.10.2", "0.11.0", "0.11.1"], ["0.11.2", "0.12.0"]),
    ],
)
def test_pyproject_allows_jax_0_11_only_where_python_does(python: str, allowed: list[str], refused: list[str]) -> None:
    """JAX 0.11 has no wheels for Python 3.11 (the package index offers 0.10.2 at most there), so the 0.11 line is
    declared for Python 3.12 and later only (jaxlib is jax's to declare: each jax requires its own)."""
    requirements = pytest.importorskip("packaging.requirements", reason="packaging evaluates the markers")
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    for name in ("jax",):
        found = [requirements.Requirement(line) for line in project["dependencies"]]
        applying = [
            r for r in found if r.name == name and (r.marker is None or r.marker.evaluate({"python_version": python}))
        ]
        assert len(applying) == 1, (name, python, [str(r) for r in applying])
        assert all(applying[0].specifier.contains(v) for v in allowed)
        assert not any(applying[0].specifier.contains(v) for v in refused)


@pytest.mark.parametrize(("pushed", "other"), [("0.10.2", "0.11.0"), ("0.11.0", "0.10.2")])
def test_a_pushed_job_image_pins_only_into_a_job_of_its_jax_line(tmp_path: Path, pushed: str, other: str) -> None:
    """The job image's inputs hold the JAX version (its Dockerfile checks it): pushed for one line, render pins it
    into a job of that line, and refuses it, with a warning, for the other."""
    path = image_job(tmp_path, {"repository": IMAGE_REPOSITORY}, pathways_version=pushed)
    job = load_job(path, installed_jax=lambda: pushed)
    found = image_spec.collect(job, path, machine=this_machine())
    assert found.jax_version == pushed
    lock.record(image_spec.lock_path(job), job.name, found.lock_entry(IMAGE_REPOSITORY, "sha256:" + "e" * 64))
    pinned, warnings = pin.pin_pushed(job, path, machine=this_machine())
    assert pinned.main.image == f"{IMAGE_REPOSITORY}@sha256:{'e' * 64}" and warnings == []

    image_job(tmp_path, {"repository": IMAGE_REPOSITORY}, pathways_version=other)
    other_job = load_job(path, installed_jax=lambda: other)
    pinned, warnings = pin.pin_pushed(other_job, path, machine=this_machine())
    assert pinned.main.image is None
    (warning,) = warnings
    assert "inputs of img-test changed since" in warning
