"""Preflight looks up every image the job's pods pull, the HLO uploader's included."""

from __future__ import annotations

from pwdeploy.config import load_job
from pwdeploy.imageref import ImageRef
from pwdeploy.preflight.image_checks import check_images, job_images
from pwdeploy.registry.client import Lookup
from pwdeploy.report import Status
from tests.conftest import REPO

EXAMPLE = REPO / "examples" / "data_parallel" / "job.yaml"
UPLOADER = "r.example/tools/cloud-sdk:1"


def test_the_hlo_uploader_image_is_checked_with_the_others() -> None:
    job = load_job(EXAMPLE, {"storage.hlo_uploader_image": UPLOADER}, installed_jax=lambda: "0.10.2")
    assert job_images(job)[UPLOADER] == ("storage.hlo_uploader_image",)
    without = load_job(EXAMPLE, {"storage.hlo_dump": ""}, installed_jax=lambda: "0.10.2")
    assert "storage.hlo_uploader_image" not in {f for fields in job_images(without).values() for f in fields}

    def lookup(ref: ImageRef) -> Lookup:
        if ref.name == UPLOADER.rsplit(":", 1)[0]:
            return Lookup("manifest_unknown", "tag '1' is not in r.example/tools/cloud-sdk", ("2",))
        return Lookup("found", "sha256:" + "0" * 64)

    rows = {row.where: row for row in check_images(job, lookup)}
    uploader = rows[UPLOADER]
    assert uploader.status is Status.FAILED
    assert uploader.fix is not None and "--hlo-uploader-image (storage.hlo_uploader_image)" in uploader.fix
    assert all(row.status is Status.OK for location, row in rows.items() if location != UPLOADER)
