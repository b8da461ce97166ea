"""Loading, merging and validating the job config."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from pwdeploy import releases
from pwdeploy.config import JobConfig, load_job, merge
from pwdeploy.errors import ConfigError, ConfigErrors

BASE: dict[str, Any] = {
    "name": "demo",
    "tpu.type": "v5p-8",
    "main.image": "img/train:1",
    "main.command": "python3 train.py",
    "storage.scratch": "gs://bucket/scratch",
}


def job(**overrides: Any) -> JobConfig:
    values = {**BASE, **{k.replace("__", "."): v for k, v in overrides.items()}}
    return load_job(None, values, installed_jax=lambda: "0.10.2")


def test_defaults() -> None:
    j = job()
    assert j.pathways_version == "0.10.2"
    assert j.main.data_workers == 23  # CPU limit 24 minus the main process
    assert j.main.command == ("python3", "train.py")
    assert j.storage.scratch is not None and j.storage.scratch.uri == "gs://bucket/scratch"
    assert j.proxy_image.endswith("/proxy_server:20261001-jax_0.10.2")  # the newest release seen (releases.py)


def test_config_is_immutable() -> None:
    with pytest.raises(AttributeError):
        job().name = "other"  # type: ignore[misc]


def test_file_then_overrides(tmp_path: Path) -> None:
    path = tmp_path / "job.yaml"
    path.write_text(
        "name: fromfile\ntpu: {type: v6e-16, slices: 2}\nmain: {image: a/b:1, command: [x], env: {A: '1', B: '2'}}\n"
        "storage: {scratch: gs://bkt/x}\nxla_flags: [--xla_a=1, --xla_b=2]\n"
    )
    j = load_job(
        path, {"tpu.slices": "3", "main.env": ["B=3"], "xla_flags": ["--xla_b=5"]}, installed_jax=lambda: "0.10.2"
    )
    assert j.name == "fromfile" and j.tpu.slices == 3
    assert dict(j.main.env) == {"A": "1", "B": "3"}
    assert j.xla_flags == ("--xla_a=1", "--xla_b=5")
    assert j.base_dir == tmp_path


@pytest.mark.parametrize(
    ("overrides", "field", "message"),
    [
        ({"name": "Bad_Name"}, "name", "DNS-1035"),
        ({"tpu__slices": 0}, "tpu.slices", ">= 1"),
        ({"tpu__slices": "two"}, "tpu.slices", "integer"),
        ({"tpu__slices": 1.5}, "tpu.slices", "integer"),
        ({"main__cpu": "lots"}, "main.cpu", "not a Kubernetes quantity"),
        ({"main__memory": "-1Gi"}, "main.memory", "not a Kubernetes quantity"),
        ({"main__shm_size": "200Gi"}, "main.shm_size", "does not fit inside main.memory"),
        ({"main__data_workers": 64}, "main.data_workers", "exceeds the user container's CPU limit"),
        ({"main__image": "img/train"}, "main.image", "not pinned"),
        ({"main__image": "img/train:latest"}, "main.image", "not pinned"),
        ({"main__command": ""}, "main.command", "must not be empty"),
        ({"main__command": "python3 'unclosed"}, "main.command", "cannot split"),
        ({"main__env": {"JAX_PLATFORMS": "cpu"}}, "main.env.JAX_PLATFORMS", "proxy or proxy,cpu"),
        ({"main__env": {"1BAD": "x"}}, "main.env.1BAD", "not a valid environment variable name"),
        ({"storage__scratch": "s3://bucket/x"}, "storage.scratch", "gs://bucket"),
        ({"storage__scratch": None}, "storage.scratch", "is required"),
        ({"storage__hlo_dump": "gs://bucket//x"}, "storage.hlo_dump", "empty path segment"),
        ({"xla_flags": ["--xla_ok=1", "-xla_bad=1"]}, "xla_flags", "is not a flag"),
        ({"xla_flags": ["--xla_a=1 --xla_b=2"]}, "xla_flags", "is not a flag"),
        ({"pathways_version": "0.9.0"}, "pathways_version", "does not match the installed jax"),
        ({"pathways_version": "latest"}, "pathways_version", "is not a JAX version"),
        ({"tpu__type": None}, "tpu.type", "is required"),
        ({"tpu__family": "v5p"}, "tpu.type", "not both"),
        ({"tpu__elastic_slices": 1}, "tpu.elastic_slices", "less than tpu.slices"),
        ({"headless": "maybe"}, "headless", "true or false"),
        ({"scheduling__queue": "Bad Queue"}, "scheduling.queue", "is not a DNS-1123 subdomain"),
        ({"sidecar__image": "img/sidecar"}, "sidecar.image", "not pinned"),
        ({"namespace": "Team"}, "namespace", "is not a DNS-1123 label"),
        ({"local__compile_cache": "gs://B/cache"}, "local.compile_cache", "is not a GCS location"),
        ({"scheduling__queue": "q" * 64}, "scheduling.queue", "at most 63"),
    ],
)
def test_bad_values_name_the_field(overrides: dict[str, Any], field: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as err:
        job(**overrides)
    assert err.value.field == field
    assert err.value.exit_code == 2


def test_version_mismatch_can_be_forced() -> None:
    assert job(pathways_version="0.9.0", allow_version_mismatch=True).pathways_version == "0.9.0"


def test_without_jax_the_newest_jax_with_a_release_is_the_version() -> None:
    assert load_job(None, BASE, installed_jax=lambda: None).pathways_version == releases.NEWEST


def test_namespace_may_start_with_a_digit() -> None:
    assert job(namespace="1team").namespace == "1team"  # a DNS-1123 label, unlike the JobSet name


def test_headless_needs_no_user_container() -> None:
    j = job(headless=True, main__image=None, main__command=None)
    assert j.headless and j.main.image is None


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("name: [unclosed", "invalid YAML at line"),
        ("- a\n- b\n", "top level must be a mapping"),
        ("tpu: [v5p-8]\n", "tpu: must be a mapping of fields, not a list"),
        ("tpu: {typo: v5p-8}\n", "tpu.typo: unknown field (did you mean 'type'?)"),
        ("nmae: x\n", "nmae: unknown field (did you mean 'name'?)"),
    ],
)
def test_bad_files(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "job.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as err:
        load_job(path, {}, installed_jax=lambda: "0.10.2")
    assert message in str(err.value)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        load_job(tmp_path / "nope.yaml", {}, installed_jax=lambda: "0.10.2")


def test_a_slice_flag_replaces_the_files_slice_in_either_form(tmp_path: Path) -> None:
    path = tmp_path / "job.yaml"
    rest = "main: {image: a:1, command: x}\nstorage: {scratch: gs://bkt/s}\n"
    path.write_text("name: x\ntpu: {family: v5p, topology: 2x2x4}\n" + rest)
    by_type = load_job(path, {"tpu.type": "v6e-16"}, installed_jax=lambda: "0.10.2")
    assert by_type.tpu.slice.instance_type == "tpuv6e:4x4"
    path.write_text("name: x\ntpu: {type: v5p-8}\n" + rest)
    by_shape = load_job(path, {"tpu.family": "v4", "tpu.topology": "2x2x2"}, installed_jax=lambda: "0.10.2")
    assert by_shape.tpu.slice.instance_type == "tpuv4:2x2x2"


def test_merge_rejects_unknown_override() -> None:
    with pytest.raises(ConfigError, match="unknown field"):
        merge({}, {"tpu.nonsense": 1})


def test_every_problem_is_raised_together_with_its_source(tmp_path: Path) -> None:
    path = tmp_path / "job.yaml"
    path.write_text("name: demo\ntpu: {type: v5p-8, slices: many}\nmain: {cpu: lots}\n")
    overrides = {"storage.scratch": "s3://bucket", "main.image": "img/train:1", "main.command": "x"}
    with pytest.raises(ConfigErrors) as err:
        load_job(path, overrides, sources={"storage.scratch": "--gcs-scratch"}, installed_jax=lambda: "0.10.2")
    found = {(e.field, e.source) for e in err.value.errors}
    assert found == {("tpu.slices", str(path)), ("main.cpu", str(path)), ("storage.scratch", "--gcs-scratch")}
    assert str(err.value).count("\n") == 2  # one line each


def test_relative_paths_resolve_against_the_config_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = tmp_path / "project"
    folder.mkdir()
    path = folder / "job.yaml"
    path.write_text(
        "name: demo\ntpu: {type: v5p-8}\nmain: {image: img/train:1, command: x}\nstorage: {scratch: gs://bkt/s}\n"
        "sidecar: {source_dir: src}\n"
    )
    monkeypatch.chdir(tmp_path)  # elsewhere: the current directory must not matter
    loaded = load_job(Path("project/job.yaml"), installed_jax=lambda: "0.10.2")
    assert loaded.local.compile_cache == str(folder / ".pwdeploy" / "jax-cache")
    assert loaded.local.hlo_dir == folder / ".pwdeploy" / "hlo"
    assert loaded.sidecar.source_dir == folder / "src"
    flagged = load_job(
        path, {"local.compile_cache": "cache", "local.hlo_dir": "/abs/hlo"}, installed_jax=lambda: "0.10.2"
    )
    assert flagged.local.compile_cache == str(folder / "cache") and flagged.local.hlo_dir == Path("/abs/hlo")
    for kept in ("", "gs://bucket/cache"):  # off, or a bucket: not paths
        assert job(local__compile_cache=kept).local.compile_cache == kept


def test_without_a_file_relative_paths_resolve_against_the_current_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert job().local.hlo_dir == tmp_path / ".pwdeploy" / "hlo"


def test_config_error_keeps_field_and_source_apart() -> None:
    error = ConfigError("tpu.slices", "must be an integer >= 1, not 0", source="--num-slices")
    assert (error.field, error.source, error.message) == (
        "tpu.slices",
        "--num-slices",
        "must be an integer >= 1, not 0",
    )
    assert str(error) == "tpu.slices: must be an integer >= 1, not 0 (from --num-slices)"


@pytest.mark.parametrize(
    ("extra", "restarts"),
    [
        ({}, 0),  # a restart would start again from step 0
        ({"storage.checkpoints": "gs://bucket-a/ckpt"}, 3),  # a restart resumes
        ({"storage.checkpoints": "gs://bucket-a/ckpt", "scheduling.max_restarts": 0}, 0),  # explicit wins
        ({"scheduling.max_restarts": 5}, 5),
    ],
)
def test_max_restarts_defaults_to_3_only_when_the_job_checkpoints(extra: dict[str, Any], restarts: int) -> None:
    job = load_job(None, {**BASE, **extra}, installed_jax=lambda: "0.10.2")
    assert job.scheduling.max_restarts == restarts


@pytest.mark.parametrize(("field", "value"), [("main.cpu", "1e400"), ("main.memory", "64Ei"), ("main.memory", "8Ei")])
def test_a_quantity_beyond_what_kubernetes_holds_is_a_field_error(field: str, value: str) -> None:
    from pwdeploy.errors import ConfigError

    with pytest.raises(ConfigError, match="larger than any Kubernetes quantity"):
        load_job(None, {**BASE, field: value}, installed_jax=lambda: "0.10.2")
    assert job(**{"main__memory": "7Ei"}).main.memory == "7Ei"
