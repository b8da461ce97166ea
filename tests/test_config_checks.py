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


# ------------------------------------------------------------------------------------------ strict grammars


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("us-docker.pkg.dev/cloud tpu", "is not a registry path"),
        ("https://us-docker.pkg.dev/cloud-tpu-v2-images/pathways", "has a scheme; give host/path without it"),
        ("us-docker.pkg.dev/cloud-tpu-v2-images/pathways/", "ends in '/'; drop it"),
        ("us-docker.pkg.dev/Cloud/pathways", "is not a registry path"),
        ("reg.io/p:1", "is not a registry path"),
    ],
)
def test_image_registry_is_checked_like_every_image_field(value: str, problem: str) -> None:
    found = errors({"image_registry": value})
    assert len(found) == 1 and found[0].startswith(f"image_registry: {value!r} {problem}")


@pytest.mark.parametrize("value", ["us-docker.pkg.dev/cloud-tpu-v2-images/pathways", "localhost:5000/pw", "reg.io"])
def test_good_image_registries_pass(value: str) -> None:
    assert errors({"image_registry": value, "images.server": None, "images.proxy_server": None}) == []


@pytest.mark.parametrize("pool", ["CPU-np", "cpu_np", "1cpu", "cpu-", "c" * 41, "cpu np"])
def test_head_node_pool_must_be_a_gke_node_pool_name(pool: str) -> None:
    found = errors({"head.node_pool": pool})
    assert len(found) == 1 and found[0].startswith(f"head.node_pool: {pool!r} is not a GKE node pool name")


@pytest.mark.parametrize("pool", ["cpu-np", "c", "np-1", "a" * 40])
def test_gke_node_pool_names_pass(pool: str) -> None:
    assert errors({"head.node_pool": pool}) == []


def test_slices_have_an_upper_bound_that_says_slices_are_not_chips() -> None:
    assert errors({"tpu.slices": 1000}) == []
    (found,) = errors({"tpu.slices": 1001})
    assert found.startswith("tpu.slices: 1001 slices is more than pwdeploy accepts (1000); it counts slices")


@pytest.mark.parametrize(
    ("key", "fine"),
    [("token", True), ("tls.crt", True), ("a-b_c.D9", True), ("k" * 253, True), ("k" * 254, False),
     ("my key", False), ("a:b", False), ("ключ", False), ("a/b", False)],
)  # fmt: skip
def test_secret_keys_follow_the_kubernetes_rule(key: str, fine: bool) -> None:
    found = errors({"main.secret_env": {"HF_TOKEN": f"hf/{key}"}})
    if fine:
        assert found == []
    else:
        assert len(found) == 1 and found[0].startswith(f"main.secret_env.HF_TOKEN: {key!r} is not a Secret key")


@pytest.mark.parametrize(
    "image", [f"{SERVER}@sha256:" + "A" * 64, f"{SERVER}@sha256:" + "a" * 40, f"{SERVER}@md5:" + "a" * 32]
)
def test_image_digests_follow_the_oci_rule(image: str) -> None:
    (found,) = errors({"images.server": image})
    assert found.startswith("images.server: ") and "sha256: and 64 lower-case hex digits, or sha512: and 128" in found


def test_a_sha512_digest_pins_an_image() -> None:
    assert errors({"images.server": f"{SERVER}@sha512:" + "a" * 128}) == []


# ------------------------------------------------------------------------------------------ the sidecar

SIDECAR_BASE = "us-docker.pkg.dev/cloud-tpu-v2-images/pathways-colocated-python/sidecar"


def test_sidecar_shm_against_worker_memory_is_a_config_check() -> None:
    sidecar = {"sidecar.image": "r.example/sc:1", "tpu.worker_memory": "24Gi", "tpu.shm_size": "16Gi"}
    (found,) = errors({**sidecar, "sidecar.shm_size": "8Gi"})
    assert found.startswith(
        "sidecar.shm_size: 8Gi together with tpu.shm_size (16Gi) does not fit inside tpu.worker_memory (24Gi)"
    )
    assert "--sidecar-shm-size" in found
    assert errors({**sidecar, "sidecar.shm_size": "4Gi"}) == []
    assert errors({**sidecar, "sidecar.image": None, "sidecar.shm_size": "8Gi"}) == [], "no sidecar: no volume"
    assert errors({**sidecar, "tpu.worker_memory": None, "sidecar.shm_size": "8Gi"}) == [], "no limit"


@pytest.mark.parametrize(
    ("overrides", "field", "other"),
    [
        ({"sidecar.base_image": f"{SIDECAR_BASE}:20260423-python_3.12-jax_0.10.2", "image.base": "python:3.11-slim"},
         "image.base", "sidecar.base_image"),
        ({"sidecar.python_version": "3.11", "image.base": "python:3.12-slim-bookworm"},
         "image.base", "sidecar.python_version"),
        ({"sidecar.base_image": f"{SIDECAR_BASE}:20260423-python_3.12-jax_0.10.2", "sidecar.python_version": "3.11"},
         "sidecar.python_version", "sidecar.base_image"),
        ({"sidecar.image": f"{SIDECAR_BASE}:20260423-python_3.11-jax_0.10.2", "sidecar.repository": None,
          "image.base": "python:3.12-slim"}, "sidecar.image", "image.base"),
    ],
)  # fmt: skip
def test_the_sidecars_python_must_equal_the_job_images(overrides: dict[str, Any], field: str, other: str) -> None:
    values = {"sidecar.repository": "r.example/sc", "sidecar.base_release": "20260423", **overrides}
    (found,) = errors(values)
    assert found.startswith(f"{field}: names Python ")
    assert f"but {other} names Python " in found and "the sidecar's Python must equal the job image's" in found


def test_the_same_python_everywhere_passes() -> None:
    values = {
        "sidecar.repository": "r.example/sc",
        "sidecar.base_image": f"{SIDECAR_BASE}:20260423-python_3.12-jax_0.10.2",
        "sidecar.python_version": "3.12",
        "image.base": "python:3.12-slim-bookworm",
    }
    assert errors(values) == []
    assert errors({**values, "sidecar.repository": None, "image.base": "python:3.11-slim"}) == [], "no sidecar"


def test_the_name_bound_is_the_coordinator_labels_22_characters_with_many_slices_too() -> None:
    """<name>-pathways-head-0-0.<name> is 2N+19 characters, a label value at most 63: N <= 22, while the longest
    pod name (<name>-worker-15-3-xxxxx for 16 slices of 4 VMs) would allow 44."""
    for slices in (1, 16):
        assert errors({"name": "a" * 22, "tpu.slices": slices}) == []
        found = errors({"name": "a" * 23, "tpu.slices": slices})
        assert len(found) == 1 and found[0].startswith("name: 'aaaaaaaaaaaaaaaaaaaaaaa' is 23 characters; ")
        assert "jobset.sigs.k8s.io/coordinator=<name>-pathways-head-0-0.<name>" in found[0]
        assert found[0].endswith("so the name can be at most 22 characters")


def test_retry_exit_codes_are_sorted_without_repeats_and_must_be_exit_codes() -> None:
    job = load_job(EXAMPLE, {"scheduling.retry_exit_codes": ["76", 3, 76]}, installed_jax=lambda: "0.10.2")
    assert job.scheduling.retry_exit_codes == (3, 76)
    from_variable = load_job(EXAMPLE, {"scheduling.retry_exit_codes": "80,81"}, installed_jax=lambda: "0.10.2")
    assert from_variable.scheduling.retry_exit_codes == (80, 81)
    assert errors({"scheduling.retry_exit_codes": [0]}) == [
        "scheduling.retry_exit_codes: must be an integer >= 1, not 0"
    ]
    assert errors({"scheduling.retry_exit_codes": [256]}) == [
        "scheduling.retry_exit_codes: 256 is not an exit code: a process exits with 1-255"
    ]
