"""TPU capacity modes (tpu.capacity and its fields): what each mode renders on the workers, the JobSet and the
head, the config mistakes that are exit 2 naming the field, and the flags as the issue spells them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from pwdeploy import identifiers as ids
from pwdeploy import manifests
from pwdeploy.cli import cli
from pwdeploy.config import load_job
from pwdeploy.config.capacity_modes import MODES
from pwdeploy.errors import ConfigError

BASE = {
    "name": "cap",
    "tpu.type": "v5p-8",
    "main.image": "us-docker.pkg.dev/p/r/train:1",
    "main.command": "python3 train.py",
    "storage.scratch": "gs://bucket-a/scratch",
}
FLAGS = [
    "--name", "cap", "--tpu-type", "v5p-8", "--image", "us-docker.pkg.dev/p/r/train:1",
    "--command", "python3 train.py", "--gcs-scratch", "gs://bucket-a/scratch",
]  # fmt: skip
GOLDEN_CONFIGS = Path(__file__).parent / "golden" / "configs"
TPU_TOLERATION = {"key": "google.com/tpu", "operator": "Exists", "effect": "NoSchedule"}


def _render(**overrides: Any) -> dict[str, Any]:
    job = load_job(None, {**BASE, **overrides}, installed_jax=lambda: "0.10.2")
    (obj,) = manifests.build(job)
    return obj


def _pod(obj: dict[str, Any], name: str) -> dict[str, Any]:
    (rj,) = [r for r in obj["spec"]["replicatedJobs"] if r["name"] == name]
    return rj["template"]["spec"]["template"]  # type: ignore[no-any-return]


def _placement(obj: dict[str, Any]) -> tuple[dict[str, str], list[dict[str, str]]]:
    spec = _pod(obj, ids.WORKER_JOB)["spec"]
    extra = {k: v for k, v in spec["nodeSelector"].items() if "gke-tpu-" not in k}
    return extra, spec["tolerations"]


SPOT_TAINT = {"key": "cloud.google.com/gke-spot", "operator": "Equal", "value": "true", "effect": "NoSchedule"}
QUEUED_TAINT = {"key": "cloud.google.com/gke-queued", "operator": "Equal", "value": "true", "effect": "NoSchedule"}


def reservation_taint(name: str) -> dict[str, str]:
    """The taint of a reservation's node pools made by node auto-provisioning (Cluster Toolkit always tolerates it)."""
    return {"key": "cloud.google.com/reservation-name", "operator": "Equal", "value": name, "effect": "NoSchedule"}


@pytest.mark.parametrize(
    ("overrides", "selector", "tolerations"),
    [
        ({}, {}, [TPU_TOLERATION]),
        ({"tpu.capacity": "spot"}, {"cloud.google.com/gke-spot": "true"}, [TPU_TOLERATION, SPOT_TAINT]),
        (
            {"tpu.capacity": "reservation", "tpu.reservation": "my-v5p-reservation"},
            {"cloud.google.com/reservation-name": "my-v5p-reservation"},
            [TPU_TOLERATION, reservation_taint("my-v5p-reservation")],
        ),
        (
            {"tpu.capacity": "reservation", "tpu.reservation": "projects/owner-proj/reservations/shared-rsv"},
            {"cloud.google.com/reservation-name": "shared-rsv", "cloud.google.com/reservation-project": "owner-proj"},
            [TPU_TOLERATION, reservation_taint("shared-rsv")],
        ),
        ({"tpu.capacity": "flex-start"}, {"cloud.google.com/gke-flex-start": "true"}, [TPU_TOLERATION]),
        (
            {"tpu.capacity": "flex-start", "tpu.max_run_duration": "90m"},
            {"cloud.google.com/gke-flex-start": "true", "cloud.google.com/gke-max-run-duration-seconds": "5400"},
            [TPU_TOLERATION],
        ),
        (
            {"tpu.capacity": "queued", "scheduling.queue": "team-a"},
            {"cloud.google.com/gke-queued": "true"},
            [TPU_TOLERATION, QUEUED_TAINT],
        ),
    ],
    ids=["on-demand", "spot", "reservation", "shared-reservation", "flex-start", "flex-start-timed", "queued"],
)
def test_each_mode_places_the_workers(
    overrides: dict[str, Any], selector: dict[str, str], tolerations: list[dict[str, str]]
) -> None:
    obj = _render(**overrides)
    assert _placement(obj) == (selector, tolerations)
    head = _pod(obj, ids.HEAD_JOB)
    assert head["spec"]["nodeSelector"] == {"cloud.google.com/gke-nodepool": "cpu-np"}, "the head is never moved"
    assert "tolerations" not in head["spec"], "nor does it tolerate a capacity taint"
    assert head["metadata"]["annotations"] == {"cluster-autoscaler.kubernetes.io/safe-to-evict": "false"}


def test_every_capacity_mode_is_one_row_with_its_golden_manifest() -> None:
    """A mode is a row of pwdeploy.config.capacity_modes plus a golden config (tests/golden/configs/capacity-MODE-*)
    whose rendered JobSet is checked in; on-demand, the default, is what every other golden renders."""
    goldens = {path.name.split("-v")[0] for path in GOLDEN_CONFIGS.glob("capacity-*.yaml")}
    missing = [m.name for m in MODES[1:] if not any(g.startswith(f"capacity-{m.name}") for g in goldens)]
    assert missing == [], f"add tests/golden/configs/capacity-MODE-TPU.yaml for {missing}, then pytest --update-goldens"


def test_queued_run_duration_is_an_annotation_of_the_jobset_not_of_its_pods() -> None:
    obj = _render(**{"tpu.capacity": "queued", "scheduling.queue": "team-a", "tpu.max_run_duration": "7d"})
    assert obj["metadata"]["annotations"]["provreq.kueue.x-k8s.io/maxRunDurationSeconds"] == "604800"
    assert obj["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-a"
    text = yaml.safe_dump(obj["spec"])
    assert "provreq.kueue.x-k8s.io" not in text
    untimed = _render(**{"tpu.capacity": "queued", "scheduling.queue": "team-a"})
    assert not any(k.startswith("provreq.") for k in untimed["metadata"]["annotations"])


def test_escape_hatches_add_to_what_the_mode_renders() -> None:
    obj = _render(
        **{
            "tpu.capacity": "spot",
            "tpu.node_selector": ["cloud.google.com/gke-nodepool=tpu-a"],
            "tpu.tolerations": ["dedicated=ml:NoSchedule", "maintenance:NoExecute"],
        }
    )
    selector, tolerations = _placement(obj)
    assert selector == {"cloud.google.com/gke-spot": "true", "cloud.google.com/gke-nodepool": "tpu-a"}
    assert tolerations[2:] == [
        {"key": "dedicated", "operator": "Equal", "value": "ml", "effect": "NoSchedule"},
        {"key": "maintenance", "operator": "Exists", "effect": "NoExecute"},
    ]


@pytest.mark.parametrize(
    ("overrides", "field", "words"),
    [
        ({"tpu.capacity": "reservation"}, "tpu.reservation", "is required with capacity reservation"),
        ({"tpu.reservation": "my-rsv"}, "tpu.reservation", "tpu.capacity is on-demand"),
        ({"tpu.capacity": "spot", "tpu.reservation": "my-rsv"}, "tpu.reservation", "tpu.capacity is spot"),
        ({"tpu.capacity": "reservation", "tpu.reservation": "Bad_Name"}, "tpu.reservation", "is not a reservation"),
        (
            {"tpu.capacity": "reservation", "tpu.reservation": "projects/p/reservations/r/x"},
            "tpu.reservation",
            "projects/PROJECT/reservations/NAME",
        ),
        ({"tpu.capacity": "queued"}, "scheduling.queue", "is required with capacity queued"),
        ({"tpu.max_run_duration": "24h"}, "tpu.max_run_duration", "not on-demand"),
        ({"tpu.capacity": "spot", "tpu.max_run_duration": "1h"}, "tpu.max_run_duration", "not spot"),
        (
            {"tpu.capacity": "reservation", "tpu.reservation": "r", "tpu.max_run_duration": "1h"},
            "tpu.max_run_duration",
            "not reservation",
        ),
        ({"tpu.capacity": "flex-start", "tpu.max_run_duration": "8d"}, "tpu.max_run_duration", "at most 7 days"),
        ({"tpu.capacity": "flex-start", "tpu.max_run_duration": "soon"}, "tpu.max_run_duration", "not a duration"),
        ({"tpu.capacity": "flex-start", "tpu.max_run_duration": "0"}, "tpu.max_run_duration", "at least 10 minutes"),
        ({"tpu.capacity": "preemptible"}, "tpu.capacity", "is not one of: on-demand, spot, reservation"),
        ({"tpu.node_selector": ["bad key!=x"]}, "tpu.node_selector.bad key!", "the name part"),
        ({"tpu.node_selector": ["pool=a/b"]}, "tpu.node_selector.pool", "is not a label value"),
        ({"tpu.node_selector": ["novalue"]}, "tpu.node_selector", "is not KEY=VALUE"),
        (
            {"tpu.node_selector": ["cloud.google.com/gke-spot=true"]},
            "tpu.node_selector.cloud.google.com/gke-spot",
            "set by pwdeploy from tpu.capacity",
        ),
        (
            {"tpu.node_selector": ["cloud.google.com/gke-tpu-topology=4x4"]},
            "tpu.node_selector.cloud.google.com/gke-tpu-topology",
            "set by pwdeploy from tpu.type",
        ),
        ({"tpu.tolerations": ["dedicated=ml"]}, "tpu.tolerations", "is not KEY[=VALUE]:EFFECT"),
        ({"tpu.tolerations": ["dedicated=ml:Sometimes"]}, "tpu.tolerations", "the effect must be one of"),
        ({"tpu.tolerations": ["bad key:NoSchedule"]}, "tpu.tolerations", "the name part"),
    ],
)
def test_inconsistent_capacity_is_a_config_error_naming_the_field(
    overrides: dict[str, Any], field: str, words: str
) -> None:
    with pytest.raises(ConfigError) as err:
        _render(**overrides)
    errors = getattr(err.value, "errors", [err.value])
    assert [e.field for e in errors] == [field], [str(e) for e in errors]
    assert words in str(errors[0])


@pytest.mark.parametrize(("text", "seconds"), [("90m", 5400), ("24h", 86400), ("7d", 604800), ("3600", 3600)])
def test_run_durations_read_as_seconds(text: str, seconds: int) -> None:
    job = load_job(None, {**BASE, "tpu.capacity": "flex-start", "tpu.max_run_duration": text})
    assert job.tpu.max_run_duration == seconds


def test_cli_flags_as_the_issue_spells_them(runner: CliRunner) -> None:
    flags = [
        "--capacity", "queued", "--queue", "team-a", "--max-run-duration", "7d",
        "--tpu-node-selector", "cloud.google.com/gke-nodepool=tpu-a", "--tpu-node-selector", "team=ml",
        "--tpu-toleration", "dedicated=ml:NoSchedule", "--tpu-toleration", "spare:NoExecute",
    ]  # fmt: skip
    result = runner.invoke(cli, ["render", *FLAGS, *flags])
    assert result.exit_code == 0, result.output
    (obj,) = yaml.safe_load_all(result.stdout)
    selector, tolerations = _placement(obj)
    assert selector == {"cloud.google.com/gke-queued": "true", "cloud.google.com/gke-nodepool": "tpu-a", "team": "ml"}
    assert [t["key"] for t in tolerations] == ["google.com/tpu", "cloud.google.com/gke-queued", "dedicated", "spare"]
    assert obj["metadata"]["annotations"]["provreq.kueue.x-k8s.io/maxRunDurationSeconds"] == "604800"
    reserved = runner.invoke(cli, ["render", *FLAGS, "--capacity", "reservation", "--reservation", "my-v5p-rsv"])
    assert reserved.exit_code == 0, reserved.output


def test_cli_inconsistent_capacity_exits_2_naming_the_flag(runner: CliRunner) -> None:
    result = runner.invoke(cli, ["render", *FLAGS, "--capacity", "reservation"])
    assert result.exit_code == 2, result.output
    assert "tpu.reservation" in result.stderr and "Traceback" not in result.output
    result = runner.invoke(cli, ["render", *FLAGS, "--max-run-duration", "24h"])
    assert result.exit_code == 2 and "tpu.max_run_duration" in result.stderr and "--max-run-duration" in result.stderr


def test_selector_and_toleration_flags_merge_with_the_file(runner: CliRunner, tmp_path: Any) -> None:
    config = tmp_path / "job.yaml"
    config.write_text(
        "tpu: {node_selector: {team: ml, pool: a}, tolerations: ['dedicated=ml:NoSchedule']}\n", encoding="utf-8"
    )
    flags = [
        "-f", str(config), "--tpu-node-selector", "pool=b",
        "--tpu-toleration", "dedicated=ml:NoSchedule", "--tpu-toleration", "spare:NoExecute",
    ]  # fmt: skip
    result = runner.invoke(cli, ["render", *FLAGS, *flags])
    assert result.exit_code == 0, result.output
    (obj,) = yaml.safe_load_all(result.stdout)
    selector, tolerations = _placement(obj)
    assert {k: v for k, v in selector.items() if k in ("team", "pool")} == {"team": "ml", "pool": "b"}
    assert [t["key"] for t in tolerations] == ["google.com/tpu", "dedicated", "spare"]


def test_one_node_pool_cannot_hold_several_slices() -> None:
    with pytest.raises(ConfigError, match="pins all 2 slices to one node pool"):
        _render(**{"tpu.slices": 2, "tpu.node_selector": {ids.NODE_POOL_LABEL: "tpu-a"}})
    one = _render(**{"tpu.node_selector": {ids.NODE_POOL_LABEL: "tpu-a"}})  # one slice, one pool: fine
    assert _pod(one, ids.WORKER_JOB)["spec"]["nodeSelector"][ids.NODE_POOL_LABEL] == "tpu-a"


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"tpu.node_selector": {None: "x"}}, "a label key must be text"),
        ({"tpu.capacity": "flex-start", "tpu.max_run_duration": "9" * 5000}, "is not a duration"),
    ],
)
def test_odd_capacity_values_are_field_errors(overrides: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        _render(**overrides)


def test_an_integer_too_long_for_python_is_a_yaml_error(tmp_path: Any) -> None:
    config = tmp_path / "job.yaml"
    config.write_text("tpu: {slices: " + "9" * 5000 + "}\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="invalid YAML"):
        load_job(config, {}, installed_jax=lambda: "0.10.2")


def test_an_empty_toleration_value_tolerates_only_the_empty_value() -> None:
    obj = _render(**{"tpu.tolerations": ["k=:NoSchedule", "j:NoExecute"]})
    _, tolerations = _placement(obj)
    assert {"key": "k", "operator": "Equal", "value": "", "effect": "NoSchedule"} in tolerations
    assert {"key": "j", "operator": "Exists", "effect": "NoExecute"} in tolerations
