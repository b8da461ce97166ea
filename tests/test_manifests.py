"""Golden manifests (compared after parsing) and the structure every JobSet must have."""

from __future__ import annotations

import functools
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from pwdeploy import identifiers as ids
from pwdeploy import manifests
from pwdeploy.config import JobConfig, load_job
from pwdeploy.config.fields import BY_PATH
from pwdeploy.config.value_kinds import parse_field
from pwdeploy.errors import ConfigError
from tests.conftest import REPO

GOLDEN = REPO / "tests" / "golden"
CONFIGS = sorted((GOLDEN / "configs").glob("*.yaml"))
EXAMPLE = REPO / "examples" / "data_parallel" / "job.yaml"


def _job(path: Path, **overrides: Any) -> JobConfig:
    return load_job(path, overrides, installed_jax=lambda: "0.10.2")


def _check_golden(rendered: str, golden: Path, update: bool) -> None:
    if update:
        golden.write_text(rendered, encoding="utf-8")
    assert golden.exists(), f"{golden} is missing; run pytest --update-goldens"
    expected = list(yaml.safe_load_all(golden.read_text(encoding="utf-8")))
    assert list(yaml.safe_load_all(rendered)) == expected, f"{golden.name} is stale; run pytest --update-goldens"


@pytest.mark.parametrize("config", CONFIGS, ids=lambda p: p.stem)
def test_golden(config: Path, update_goldens: bool) -> None:
    rendered = manifests.to_yaml(manifests.build(_job(config)))
    _check_golden(rendered, GOLDEN / f"{config.stem}.yaml", update_goldens)


def test_example_manifests_checked_in_are_current(update_goldens: bool) -> None:
    rendered = manifests.to_yaml(manifests.build(_job(EXAMPLE)))
    _check_golden(rendered, REPO / "manifests" / "dp-example.yaml", update_goldens)


_RENDER_ALL = """
import sys
from pathlib import Path
from pwdeploy import manifests
from pwdeploy.config import load_job
for path in sys.argv[1:]:
    sys.stdout.write(manifests.to_yaml(manifests.build(load_job(Path(path), installed_jax=lambda: "0.10.2"))))
"""


def test_render_is_deterministic_across_processes() -> None:
    """Byte-identical output in processes with different string hashes (set and dict orders a hash seed could
    change), and equal to this process's."""
    paths = [str(path) for path in CONFIGS]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    outputs = [
        subprocess.run(
            [sys.executable, "-c", _RENDER_ALL, *paths],
            env={**env, "PYTHONHASHSEED": seed},
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        ).stdout
        for seed in ("1", "2")
    ]
    here = "".join(manifests.to_yaml(manifests.build(_job(path))) for path in CONFIGS)
    assert outputs[0] == outputs[1] == here and len(CONFIGS) > 3


def test_yaml_has_no_anchors() -> None:
    """An object the builders share between two places is written twice, never as an alias."""
    shared = {"name": "X", "value": "1"}
    text = manifests.to_yaml([{"kind": "List", "metadata": {"name": "x"}, "a": [shared], "b": [shared]}])
    assert "&" not in text and "*" not in text


def _spec(obj: dict[str, Any], rj: str) -> dict[str, Any]:
    job = next(r for r in obj["spec"]["replicatedJobs"] if r["name"] == rj)
    return job  # type: ignore[no-any-return]


def _pod(obj: dict[str, Any], rj: str) -> dict[str, Any]:
    return _spec(obj, rj)["template"]["spec"]["template"]["spec"]  # type: ignore[no-any-return]


def _container(pod: dict[str, Any], name: str) -> dict[str, Any]:
    found: list[dict[str, Any]] = [
        c for section in ("initContainers", "containers") for c in pod.get(section, []) if c["name"] == name
    ]
    assert len(found) == 1, f"{name}: {len(found)} containers"
    return found[0]


def _env(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container.get("env", [])}


def _mounts(container: dict[str, Any]) -> dict[str, str]:
    return {m["name"]: m["mountPath"] for m in container.get("volumeMounts", [])}


def _volumes(pod: dict[str, Any]) -> dict[str, Any]:
    return {v["name"]: v for v in pod.get("volumes", [])}


def _build(config: str, **overrides: Any) -> dict[str, Any]:
    (obj,) = manifests.build(_job(GOLDEN / "configs" / config, **overrides))
    return obj


def test_multi_slice_structure() -> None:
    obj = _build("multi-slice-v5p.yaml")
    worker = _spec(obj, ids.WORKER_JOB)
    assert worker["replicas"] == 2
    assert worker["template"]["spec"]["completions"] == worker["template"]["spec"]["parallelism"] == 1
    assert worker["template"]["spec"]["backoffLimit"] == 4
    head = _pod(obj, ids.HEAD_JOB)
    proxy, rm = _container(head, ids.PROXY_CONTAINER), _container(head, ids.RM_CONTAINER)
    assert proxy["restartPolicy"] == rm["restartPolicy"] == "Always"
    assert "--xla_tpu_enable_async_collective_fusion=true" in proxy["args"]
    for container in (proxy, rm, _pod(obj, ids.WORKER_JOB)["containers"][0]):
        assert "--gcs_scratch_location=gs://bucket-b/pathways" in container["args"]
    assert "--instance_type=tpuv5:2x2x1" in rm["args"] and "--instance_count=2" in rm["args"]
    main = _container(head, ids.MAIN_CONTAINER)
    env = _env(main)
    assert env["JAX_PLATFORMS"] == "proxy" and env["ENABLE_PATHWAYS_PERSISTENCE"] == "1"
    assert env["JAX_BACKEND_TARGET"] == f"grpc://localhost:{ids.PROXY_PORT}"
    assert env["PWDEPLOY_DATA_WORKERS"] == "8"
    assert env["PWDEPLOY_PROFILE_DIR"] == "gs://bucket-b/profiles"
    assert main["securityContext"]["privileged"] is False
    assert _volumes(head)[ids.SHM_VOLUME]["emptyDir"] == {"medium": "Memory", "sizeLimit": "12Gi"}
    assert _mounts(main)[ids.SHM_VOLUME] == ids.SHM_DIR
    assert obj["metadata"]["labels"][ids.QUEUE_LABEL] == "tpu-queue"
    assert obj["spec"]["failurePolicy"] == {**obj["spec"]["failurePolicy"], "maxRestarts": 3}
    assert obj["spec"]["failurePolicy"]["restartStrategy"] == "BlockingRecreate"
    assert head["serviceAccountName"] == "trainer-ksa" and head["priorityClassName"] == "high"


def test_hlo_dump_goes_through_a_local_volume_and_an_uploader() -> None:
    head = _pod(_build("multi-slice-v5p.yaml"), ids.HEAD_JOB)
    proxy, uploader = _container(head, ids.PROXY_CONTAINER), _container(head, ids.HLO_UPLOADER_CONTAINER)
    assert _env(proxy)["XLA_FLAGS"] == f"--xla_dump_to={ids.HLO_DIR}/"  # as axlearn passes them to the proxy
    assert not any(a.startswith("--xla_dump") for a in proxy["args"])
    assert "--xla_tpu_enable_async_collective_fusion=true" in proxy["args"], "other XLA flags stay arguments"
    assert _mounts(proxy)[ids.HLO_VOLUME] == _mounts(uploader)[ids.HLO_VOLUME] == ids.HLO_DIR
    assert _volumes(head)[ids.HLO_VOLUME]["emptyDir"] == {}  # on the node's disk, not in memory
    # A native sidecar listed first: it starts first and is stopped last, after the proxy wrote everything.
    assert head["initContainers"][0] is uploader and uploader["restartPolicy"] == "Always"
    script = uploader["command"][-1]
    assert f"rsync --recursive {ids.HLO_DIR} gs://bucket-b/hlo" in script and "trap" in script
    assert uploader["image"] == "google/cloud-sdk:502.0.0-slim"
    pinned = _build("multi-slice-v5p.yaml", **{"storage.hlo_uploader_image": "r.example/gcloud:7"})
    assert _container(_pod(pinned, ids.HEAD_JOB), ids.HLO_UPLOADER_CONTAINER)["image"] == "r.example/gcloud:7"


def test_headless_hlo_uploader_is_a_plain_container() -> None:
    head = _pod(_build("headless-v4.yaml", **{"storage.hlo_dump": "gs://bucket-c/hlo"}), ids.HEAD_JOB)
    assert "initContainers" not in head
    assert [c["name"] for c in head["containers"]] == [
        ids.PROXY_CONTAINER,
        ids.RM_CONTAINER,
        ids.HLO_UPLOADER_CONTAINER,
    ]
    assert all("restartPolicy" not in c for c in head["containers"])


def test_no_hlo_dump_no_uploader() -> None:
    head = _pod(_build("single-slice-v6e.yaml"), ids.HEAD_JOB)
    names = [c["name"] for section in ("initContainers", "containers") for c in head[section]]
    assert ids.HLO_UPLOADER_CONTAINER not in names and ids.HLO_VOLUME not in _volumes(head)


def test_headless_has_plain_servers_and_no_success_policy() -> None:
    obj = _build("headless-v4.yaml")
    head = _pod(obj, ids.HEAD_JOB)
    assert "initContainers" not in head
    assert [c["name"] for c in head["containers"]] == [ids.PROXY_CONTAINER, ids.RM_CONTAINER]
    assert all("restartPolicy" not in c for c in head["containers"])
    assert "successPolicy" not in obj["spec"]
    assert "--enable_gcs_olm=false" in head["containers"][1]["args"]
    worker = _spec(obj, ids.WORKER_JOB)["template"]["spec"]
    assert worker["completions"] == 2  # v4-16: 8 chips on 2 VMs


def test_user_dump_flags_join_the_proxys_xla_flags() -> None:
    flags = ["--xla_dump_hlo_as_text", "--xla_dump_to=/tmp/ignored", "--xla_tpu_enable_latency_hiding_scheduler=true"]
    proxy = _container(_pod(_build("multi-slice-v5p.yaml", xla_flags=flags), ids.HEAD_JOB), ids.PROXY_CONTAINER)
    assert _env(proxy)["XLA_FLAGS"] == f"--xla_dump_hlo_as_text --xla_dump_to={ids.HLO_DIR}/"
    assert "--xla_tpu_enable_latency_hiding_scheduler=true" in proxy["args"]
    assert not any(a.startswith("--xla_dump") for a in proxy["args"])
    plain = _container(_pod(_build("single-slice-v6e.yaml", xla_flags=flags[:2]), ids.HEAD_JOB), ids.PROXY_CONTAINER)
    assert _env(plain)["XLA_FLAGS"] == "--xla_dump_hlo_as_text --xla_dump_to=/tmp/ignored", "no uploader: kept"
    assert "XLA_FLAGS" not in _env(_container(_pod(_build("single-slice-v6e.yaml"), ids.HEAD_JOB), ids.PROXY_CONTAINER))


def test_resource_manager_knows_its_jobset_and_replicated_job() -> None:
    rm = _container(_pod(_build("single-slice-v6e.yaml"), ids.HEAD_JOB), ids.RM_CONTAINER)
    assert _env(rm)["JOBSET_NAME"] == {"fieldRef": {"fieldPath": f"metadata.annotations['{ids.JOBSET_NAME_LABEL}']"}}
    assert _env(rm)["REPLICATED_JOB_NAME"] == {
        "fieldRef": {"fieldPath": f"metadata.annotations['{ids.REPLICATED_JOB_LABEL}']"}
    }


def test_transfer_memory_is_unsized_unless_capped() -> None:
    """A full transfer volume aborts the proxy client (a CHECK on the write): by default the volume has no cap
    of its own and main.memory bounds it; head.transfer_shm_size caps it."""
    capped = _pod(_build("single-slice-v6e.yaml", **{"head.transfer_shm_size": "8Gi"}), ids.HEAD_JOB)
    assert _volumes(capped)[ids.TRANSFER_VOLUME]["emptyDir"] == {"medium": "Memory", "sizeLimit": "8Gi"}


def test_client_and_proxy_share_transfer_memory() -> None:
    head = _pod(_build("single-slice-v6e.yaml"), ids.HEAD_JOB)
    main, proxy = _container(head, ids.MAIN_CONTAINER), _container(head, ids.PROXY_CONTAINER)
    assert _volumes(head)[ids.TRANSFER_VOLUME]["emptyDir"] == {"medium": "Memory"}
    assert _mounts(main)[ids.TRANSFER_VOLUME] == _mounts(proxy)[ids.TRANSFER_VOLUME] == ids.TRANSFER_DIR
    directory = "IFRT_PROXY_LARGE_TRANSFER_OPTIMIZATION_DIRECTORY"
    assert _env(main)[directory] == _env(proxy)[directory] == ids.TRANSFER_DIR
    assert _env(main)["IFRT_PROXY_LARGE_TRANSFER_THRESHOLD"] == "1"
    assert "IFRT_PROXY_LARGE_TRANSFER_THRESHOLD" not in _env(proxy)


@pytest.mark.parametrize(("config", "overrides"), [("pinned-v5p.yaml", {}), ("headless-v4.yaml", {})])
def test_no_transfer_memory_when_off_or_headless(config: str, overrides: dict[str, Any]) -> None:
    obj = _build(config, **overrides)
    head = _pod(obj, ids.HEAD_JOB)
    assert ids.TRANSFER_VOLUME not in _volumes(head)
    containers = [c for section in ("initContainers", "containers") for c in head.get(section, [])]
    assert not any(name.startswith("IFRT_PROXY_") for c in containers for name in _env(c))


@pytest.mark.parametrize(
    ("overrides", "names"),
    [
        ({"head.transfer_shm_size": "90Gi"}, "main.memory (100Gi) together with main.shm_size (16Gi)"),
        ({"head.transfer_shm_size": "40Gi", "head.proxy_memory": "32Gi"}, "head.proxy_memory (32Gi)"),
    ],
)
def test_transfer_memory_must_fit_the_containers_that_mount_it(overrides: dict[str, str], names: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(names)) as err:
        _build("single-slice-v6e.yaml", **overrides)
    assert err.value.field == "head.transfer_shm_size" and "--transfer-shm-size" in str(err.value)


def test_worker_flags_env_and_pinned_images() -> None:
    obj = _build("pinned-v5p.yaml")
    worker = _container(_pod(obj, ids.WORKER_JOB), ids.WORKER_CONTAINER)
    assert worker["args"][-2:] == [
        "--megascale_grpc_premap_memory_bytes=17179869184",
        "--tpu_pinned_host_allocation_recycle=true",
    ]
    env = _env(worker)
    assert env["LIBTPU_INIT_ARGS"] == "--xla_tpu_scoped_vmem_limit_kib=98304"
    assert env["MEGASCALE_GRPC_ENABLE_XOR_TRACER"] == "true"  # worker_env beats the default
    assert [e["name"] for e in worker["env"]].count("MEGASCALE_GRPC_ENABLE_XOR_TRACER") == 1
    head = _pod(obj, ids.HEAD_JOB)
    assert _container(head, ids.PROXY_CONTAINER)["image"].endswith("/proxy_server:20260730-jax_0.10.2")
    assert _container(head, ids.RM_CONTAINER)["image"] == worker["image"]
    assert worker["image"].endswith("/server:20260730-jax_0.10.2")
    assert not any(a.startswith("--megascale") for a in _container(head, ids.PROXY_CONTAINER)["args"])
    assert obj["spec"]["failurePolicy"]["restartStrategy"] == "Recreate"


def test_workers_get_the_producers_defaults() -> None:
    env = _env(_container(_pod(_build("single-slice-v6e.yaml"), ids.WORKER_JOB), ids.WORKER_CONTAINER))
    assert env["MEGASCALE_GRPC_ENABLE_XOR_TRACER"] == "false"
    assert env["TF_CPP_MIN_LOG_LEVEL"] == env["TPU_MIN_LOG_LEVEL"] == "0"


def test_secret_env_is_a_reference() -> None:
    main = _container(_pod(_build("pinned-v5p.yaml"), ids.HEAD_JOB), ids.MAIN_CONTAINER)
    refs = {e["name"]: e for e in main["env"] if "valueFrom" in e}
    assert refs["HF_TOKEN"] == {
        "name": "HF_TOKEN",
        "valueFrom": {"secretKeyRef": {"name": "hf-credentials", "key": "token"}},
    }
    assert refs["WANDB_API_KEY"]["valueFrom"] == {"secretKeyRef": {"name": "wandb", "key": "api-key"}}


_LOWER, _DIGITS = "abcdefghijklmnopqrstuvwxyz", "0123456789"
_SECRET_NAMES = st.builds(  # a DNS-1123 subdomain label: [a-z][a-z0-9-]{0,20}[a-z0-9]
    "".join, st.tuples(st.sampled_from(_LOWER), st.text(_LOWER + _DIGITS + "-", max_size=20), st.sampled_from(_LOWER))
)
_KEYS = st.text(_LOWER + _LOWER.upper() + _DIGITS + "._-", min_size=1, max_size=20)  # a Secret's data key
_ENV_NAMES = st.text(_LOWER.upper() + _DIGITS + "_", min_size=1, max_size=12).map("SECRET_".__add__)
_SECRET_ENV = BY_PATH["main.secret_env"]


@functools.cache
def _base_job() -> JobConfig:
    """Loaded once: each example only parses its secret_env and builds."""
    return _job(GOLDEN / "configs" / "single-slice-v6e.yaml")


@settings(max_examples=25, deadline=None)
@given(st.dictionaries(_ENV_NAMES, st.tuples(_SECRET_NAMES, _KEYS), min_size=1, max_size=4))
def test_secret_env_never_carries_a_value(refs: dict[str, tuple[str, str]]) -> None:
    """pwdeploy is given only where a secret lives (NAME: SECRET/KEY, parsed by the config's own parser), and
    renders exactly that: no entry with a value."""
    secret_env = {name: f"{secret}/{key}" for name, (secret, key) in refs.items()}
    job = _base_job()
    parsed = parse_field(_SECRET_ENV, secret_env, job.base_dir)
    (obj,) = manifests.build(job._replace(main=job.main._replace(secret_env=parsed)))
    main = _container(_pod(obj, ids.HEAD_JOB), ids.MAIN_CONTAINER)
    entries = {e["name"]: e for e in main["env"] if e["name"] in refs}
    assert entries == {
        name: {"name": name, "valueFrom": {"secretKeyRef": {"name": secret, "key": key}}}
        for name, (secret, key) in refs.items()
    }


def test_sidecar_wiring() -> None:
    obj = _build("sidecar-v6e.yaml")
    worker = _pod(obj, ids.WORKER_JOB)
    sidecar = _container(worker, ids.SIDECAR_CONTAINER)
    assert worker["initContainers"] == [sidecar] and sidecar["restartPolicy"] == "Always"
    assert sidecar["ports"] == [{"containerPort": ids.SIDECAR_PORT, "protocol": "TCP"}]
    shm_dir = _env(sidecar)["CLOUD_PATHWAYS_SIDECAR_SHM_DIRECTORY"]
    pathways_worker = _container(worker, ids.WORKER_CONTAINER)
    assert f"--cloud_pathways_sidecar_shm_directory={shm_dir}" in pathways_worker["args"]
    assert _mounts(sidecar)[ids.SIDECAR_SHM_VOLUME] == _mounts(pathways_worker)[ids.SIDECAR_SHM_VOLUME] == shm_dir
    proxy = _container(_pod(obj, ids.HEAD_JOB), ids.PROXY_CONTAINER)
    assert "--sidecar_name=external" in proxy["args"]


def test_without_sidecar_no_sidecar_wiring() -> None:
    obj = _build("single-slice-v6e.yaml")
    assert "initContainers" not in _pod(obj, ids.WORKER_JOB)
    assert "--sidecar_name=external" not in _container(_pod(obj, ids.HEAD_JOB), ids.PROXY_CONTAINER)["args"]


def test_elastic_slices() -> None:
    obj = _build("elastic-v5e.yaml")
    head = _pod(obj, ids.HEAD_JOB)
    proxy = _container(head, ids.PROXY_CONTAINER)
    assert "--num_elastic_slices=1" in proxy["args"]
    assert "--gcs_scratch_location=gs://elastic-bucket/scratch" in proxy["args"]
    worker = _spec(obj, ids.WORKER_JOB)["template"]["spec"]
    assert worker["backoffLimit"] == 3 * 8  # max_slice_restarts x VMs per slice (v5litepod-32: 8 VMs)
    assert _container(head, ids.MAIN_CONTAINER)["securityContext"] == {"privileged": True}


def _pathways_images(config: Path) -> list[str]:
    (obj,) = manifests.build(_job(config))
    head, worker = _pod(obj, ids.HEAD_JOB), _pod(obj, ids.WORKER_JOB)
    images = [_container(head, name)["image"] for name in (ids.PROXY_CONTAINER, ids.RM_CONTAINER)]
    return [*images, _container(worker, ids.WORKER_CONTAINER)["image"]]


def test_images_pinned_to_one_version() -> None:
    derived = _pathways_images(GOLDEN / "configs" / "multi-slice-v5p.yaml")
    assert all(i.endswith(":20261001-jax_0.10.2") for i in derived)  # the newest release seen for 0.10.2
    pinned = _pathways_images(EXAMPLE)  # the example pins a dated release of the same JAX version
    assert [i.rsplit("/", 1)[-1] for i in pinned] == [
        "proxy_server:20260730-jax_0.10.2",
        "server:20260730-jax_0.10.2",
        "server:20260730-jax_0.10.2",
    ]


ALL_GOLDENS = [*sorted(GOLDEN.glob("*.yaml")), REPO / "manifests" / "dp-example.yaml"]


@pytest.mark.parametrize("golden", ALL_GOLDENS, ids=lambda p: p.stem)
def test_goldens_pass_validation(golden: Path) -> None:
    from pwdeploy.validation.validate import validate_objects

    objects = list(yaml.safe_load_all(golden.read_text(encoding="utf-8")))
    assert validate_objects(objects) == []


@pytest.mark.parametrize("version", ["0.10.1", "0.12.0"])
@pytest.mark.parametrize("golden", ALL_GOLDENS, ids=lambda p: p.stem)
def test_goldens_pass_the_jobset_crds(golden: Path, version: str) -> None:
    from tests.crd import validate_against_crd

    for obj in yaml.safe_load_all(golden.read_text(encoding="utf-8")):
        assert validate_against_crd(obj, version) == []


def test_sidecar_repository_without_a_pushed_image_is_a_clear_error(tmp_path: Path) -> None:
    config = GOLDEN / "configs" / "sidecar-v6e.yaml"
    job = _job(config, **{"sidecar.image": "", "sidecar.repository": "us-docker.pkg.dev/p/r/sidecar"})
    with pytest.raises(ConfigError, match="no pushed sidecar image matches") as err:
        manifests.build(job)
    assert err.value.field == "sidecar.repository" and "pwdeploy sidecar build --push" in str(err.value)


VARIANTS = [
    ("headless-v4.yaml", {"storage.hlo_dump": "gs://bucket-c/hlo"}),
    ("sidecar-v6e.yaml", {"storage.hlo_dump": "gs://bucket-d/hlo", "worker_flags": ["--megascale_x=1"]}),
    ("single-slice-v6e.yaml", {"head.transfer_shm_size": "0", "main.secret_env": {"HF_TOKEN": "hf/token"}}),
    ("elastic-v5e.yaml", {"scheduling.restart_strategy": "Recreate", "worker_env": {"LIBTPU_INIT_ARGS": "--x=1"}}),
]


@pytest.mark.parametrize(("config", "overrides"), VARIANTS, ids=lambda v: v if isinstance(v, str) else "")
def test_variant_combinations_pass_validation_and_the_crds(config: str, overrides: dict[str, Any]) -> None:
    from pwdeploy.validation.validate import validate_objects
    from tests.crd import CRD_VERSIONS, validate_against_crd

    objects = manifests.build(_job(GOLDEN / "configs" / config, **overrides))
    assert validate_objects(objects) == []
    for version in CRD_VERSIONS:
        assert all(validate_against_crd(obj, version) == [] for obj in objects)


_DOMAIN_KEY = re.compile(r"^[a-z0-9-]+(\.[a-z0-9-]+)+/")  # kubernetes.io/hostname, jobset.x-k8s.io/v1alpha2


def test_every_domain_name_the_builders_write_comes_from_identifiers() -> None:
    """A label, annotation, resource or API group the manifests carry is named once, in pwdeploy/identifiers.py:
    no string in pwdeploy/manifests/ (docstrings aside) starts with a domain and a slash."""
    import ast

    spelled = []
    for path in sorted((REPO / "pwdeploy" / "manifests").glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        docstrings = {
            id(node.body[0].value)
            for node in ast.walk(tree)
            if isinstance(node, ast.Module | ast.FunctionDef | ast.ClassDef)
            and node.body
            and isinstance(node.body[0], ast.Expr)
            and isinstance(node.body[0].value, ast.Constant)
        }
        spelled += [
            f"{path.name}:{node.lineno}: {node.value!r}"
            for node in ast.walk(tree)
            if isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and id(node) not in docstrings
            and _DOMAIN_KEY.match(node.value)
        ]
    assert spelled == [], "name these in pwdeploy/identifiers.py"


def test_the_domain_name_scan_finds_a_planted_label() -> None:
    assert _DOMAIN_KEY.match("kubernetes.io/hostname") and _DOMAIN_KEY.match("cloud.google.com/gke-spot")
    assert not _DOMAIN_KEY.match("/bin/sh") and not _DOMAIN_KEY.match("gs://bucket/x")


@pytest.mark.parametrize("config", CONFIGS, ids=lambda p: p.stem)
def test_the_manifests_hold_plain_values_any_yaml_or_json_writer_takes(config: Path) -> None:
    """The config keeps quantities as ``quantity.Quantity`` (a str with its parsed amount); the manifests carry
    plain ``str`` only, so ``yaml.safe_dump`` of what ``api.render`` returns works for a library user too."""
    objects = manifests.build(_job(config))

    def kinds(value: Any) -> set[type]:
        if isinstance(value, dict):
            return {t for key, item in value.items() for t in kinds(key) | kinds(item)}
        if isinstance(value, list):
            return {t for item in value for t in kinds(item)}
        return {type(value)}

    assert kinds(objects) <= {str, int, bool, type(None)}
    assert yaml.safe_load(yaml.safe_dump(objects)) == objects
