"""The Pathways releases seen (pwdeploy.releases): the default images, the warning for a JAX without a release,
and pwdeploy's own jax bound kept at the newest JAX with one."""

from __future__ import annotations

import re
import tomllib

from pwdeploy import releases
from pwdeploy.advice import job_warnings
from pwdeploy.config import load_job
from tests.conftest import REPO
from tests.kube_objects import small_job

REGISTRY = "us-docker.pkg.dev/cloud-tpu-v2-images/pathways"


def test_a_jax_with_a_release_gets_its_newest_tag_not_a_guess() -> None:
    job = small_job({"pathways_version": "0.10.2"})
    assert job.server_image == f"{REGISTRY}/server:20261001-jax_0.10.2"
    assert job.proxy_image == f"{REGISTRY}/proxy_server:20261001-jax_0.10.2"
    assert not [w for w in job_warnings(job) if "no Pathways release" in w]


def test_a_jax_without_a_release_renders_the_guess_and_says_so() -> None:
    job = load_job(
        None,
        {"name": "x", "tpu.type": "v5p-8", "main.image": "r/m:1", "main.command": "python3 t.py",
         "storage.scratch": "gs://bkt/s"},
        installed_jax=lambda: "0.11.2",
    )  # fmt: skip
    assert job.server_image.endswith("/server:jax-0.11.2")
    (warning,) = [w for w in job_warnings(job) if "no Pathways release" in w]
    assert "0.11.1 (20260901-jax_0.11.1)" in warning and "images.server and images.proxy_server" in warning
    pinned = job._replace(images=job.images._replace(server="r/s:1", proxy_server="r/p:1"))
    assert not [w for w in job_warnings(pinned) if "no Pathways release" in w]


def test_the_jax_the_warning_says_to_install_is_the_nearest_with_a_release() -> None:
    """An older JAX without a release is told to install the nearest that has one, not the newest."""
    job = small_job({"pathways_version": "0.9.0", "allow_version_mismatch": True})
    (warning,) = [w for w in job_warnings(job) if "no Pathways release" in w]
    nearest = releases.nearest("0.9.0")[0]
    assert nearest != releases.NEWEST and f"pip install jax=={nearest} jaxlib=={nearest}" in warning


def test_without_jax_installed_the_newest_release_is_the_default() -> None:
    job = load_job(
        None,
        {"name": "x", "tpu.type": "v5p-8", "main.image": "r/m:1", "main.command": "python3 t.py",
         "storage.scratch": "gs://bkt/s"},
        installed_jax=lambda: None,
    )  # fmt: skip
    assert job.pathways_version == releases.NEWEST == "0.11.1"


def test_nearest_versions() -> None:
    assert releases.nearest("0.11.2") == ["0.11.1", "0.11.0"]
    assert releases.nearest("0.10.3")[0] == "0.10.2"


def test_pwdeploys_jax_stops_at_the_newest_jax_with_a_release() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    bounds = [re.search(r"<=([0-9.]+)", d) for d in project["project"]["dependencies"] if d.startswith("jax")]
    assert [b[1] for b in bounds if b] == [releases.NEWEST]  # jax (jaxlib is jax's to declare)
