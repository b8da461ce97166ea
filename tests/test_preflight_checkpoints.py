"""Preflight of storage.checkpoints: apart from the scratch location, lifecycle rules that can delete checkpoints,
the delete permission Orbax needs; the verdicts unit-tested, then against a real GCS JSON API (the emulator)."""

from __future__ import annotations

from typing import Any

import pytest

from pwdeploy.config import JobConfig, load_job, parse_gcs
from pwdeploy.errors import ConfigError
from pwdeploy.gcs import iam as perms
from pwdeploy.gcs.lifecycle_rules import describe, reaches, read_rules
from pwdeploy.preflight import run_preflight
from pwdeploy.preflight.gcs_evaluate import placement_row
from pwdeploy.report import PreflightReport, Status
from tests import gcs_emulator as emulator
from tests.gcs_emulator import GcsEmulator

gcs_emulator = emulator.gcs_emulator
emulator_env = emulator.emulator_env

BASE = {"name": "pf", "tpu.type": "v5p-8", "main.image": "r/img:1", "main.command": "python3 train.py"}


def delete(**condition: Any) -> dict[str, Any]:
    return {"action": {"type": "Delete"}, "condition": condition}


def test_delete_rules_that_reach_live_objects_are_kept_and_described() -> None:
    rules = read_rules(
        [
            delete(age=30),
            delete(age=7, matchesPrefix=["tmp/", "runs/a/"]),
            delete(isLive=False, age=1),  # noncurrent versions only
            delete(numNewerVersions=3),
            {"action": {"type": "SetStorageClass", "storageClass": "COLDLINE"}, "condition": {"age": 1}},
            {"action": "Delete"},  # not the API's shape
            delete(matchesSuffix=[".txt"]),
        ]
    )
    assert [r.number for r in rules.deletes] == [1, 2, 7] and rules.unreadable == (6,)
    every, scoped, suffix = rules.deletes
    assert describe(every) == "Delete; age >= 30 days"
    assert describe(scoped) == "Delete; age >= 7 days; prefixes tmp/ runs/a/"
    assert reaches(every, "ckpt") and reaches(every, "")
    assert not reaches(scoped, "ckpt") and not reaches(scoped, "runs/ab")
    assert reaches(scoped, "runs/a/job1") and reaches(scoped, "runs") and reaches(scoped, "")
    assert reaches(suffix, "ckpt")  # commit_success.txt is a checkpoint file


def test_a_checkpoint_location_inside_the_scratch_location_fails_with_a_location_apart() -> None:
    scratch = parse_gcs("gs://bkt/pathways/scratch", "storage.scratch")
    inside = placement_row({"storage.scratch": scratch, "storage.checkpoints": scratch.child("ckpt")})
    assert inside is not None and inside.status is Status.FAILED
    assert inside.message.startswith("inside the scratch location gs://bkt/pathways/scratch")
    assert inside.fix == "use a location outside gs://bkt/pathways/scratch, e.g. gs://bkt/pathways/checkpoints"
    same = placement_row({"storage.scratch": scratch, "storage.checkpoints": scratch})
    assert same is not None and same.status is Status.FAILED
    root = parse_gcs("gs://bkt", "storage.scratch")
    anywhere = placement_row({"storage.scratch": root, "storage.checkpoints": scratch})
    assert anywhere is not None and anywhere.fix.endswith("a prefix of another bucket")
    for apart in ("gs://bkt/pathways/scratch2", "gs://bkt/pathways", "gs://other/pathways/scratch/ckpt"):
        row = placement_row({"storage.scratch": scratch, "storage.checkpoints": parse_gcs(apart, "x")})
        assert row is not None and row.status is Status.OK, apart
    assert placement_row({"storage.scratch": scratch}) is None


def test_checkpoints_need_delete_which_object_admin_grants() -> None:
    assert perms.OBJECTS_DELETE in perms.needed("storage.checkpoints", enable_olm=True)
    assert perms.OBJECTS_DELETE not in perms.needed("storage.profiles", enable_olm=True)
    assert perms.roles_for({perms.OBJECTS_DELETE}) == ["roles/storage.objectAdmin"]


def job(**storage: Any) -> JobConfig:
    values = {**BASE, **{f"storage.{key}": value for key, value in storage.items()}}
    return load_job(None, values, installed_jax=lambda: "0.10.2")


def preflight(job: JobConfig) -> PreflightReport:
    return run_preflight(job, check_images=False)


def row(report: PreflightReport, check: str) -> Any:
    (found,) = [r for r in report.results if r.id == check]
    return found


@pytest.mark.gcs
def test_emulator_a_lifecycle_rule_that_can_delete_checkpoints_is_a_warning(emulator_env: GcsEmulator) -> None:
    bucket = emulator_env.create_bucket()
    emulator_env.patch_bucket(bucket, {"lifecycle": {"rule": [delete(age=14)]}})
    report = preflight(job(scratch=f"gs://{bucket}/pw/scratch", checkpoints=f"gs://{bucket}/pw/ckpt"))
    retention = row(report, "retention")
    assert (retention.where, retention.status) == (f"gs://{bucket}/pw/ckpt", Status.WARN)
    assert "can delete checkpoints here (Delete; age >= 14 days)" in retention.message
    assert retention.fix.startswith("give the rule(s) matchesPrefix conditions that leave pw/ckpt/ out")
    assert row(report, "placement").status is Status.OK
    assert not report.failed  # a warning: an age longer than the job is harmless
    assert emulator_env.list_objects(bucket) == []  # the probes cleaned up


@pytest.mark.gcs
def test_emulator_rules_scoped_elsewhere_leave_checkpoints_alone(emulator_env: GcsEmulator) -> None:
    bucket = emulator_env.create_bucket()
    rules = [delete(age=1, matchesPrefix=["pw/scratch/"]), delete(isLive=False, age=1)]
    emulator_env.patch_bucket(bucket, {"lifecycle": {"rule": rules}})
    report = preflight(job(scratch=f"gs://{bucket}/pw/scratch", checkpoints=f"gs://{bucket}/pw/ckpt"))
    retention = row(report, "retention")
    assert retention.status is Status.OK and retention.message.startswith("no lifecycle rule deletes live objects")
    probes = {r.where: r.status for r in report.results if r.id == "probe"}
    assert probes[f"gs://{bucket}/pw/ckpt"] is Status.OK
    assert not report.failed


@pytest.mark.gcs
def test_emulator_checkpoints_inside_the_scratch_location_are_refused_before_preflight(
    emulator_env: GcsEmulator,
) -> None:
    """The config refuses them (render too), so preflight's placement row is never reached with them; the row's
    own rule is tested above."""
    bucket = emulator_env.create_bucket()
    with pytest.raises(ConfigError, match=f"storage.checkpoints: gs://{bucket}/s/ckpt is inside the scratch"):
        job(scratch=f"gs://{bucket}/s", checkpoints=f"gs://{bucket}/s/ckpt")
