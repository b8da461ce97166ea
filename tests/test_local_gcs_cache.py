"""`pwdeploy local run --compile-cache gs://...`: JAX's persistent cache in a bucket of the GCS emulator, and a
cache that cannot be used turned off in one line instead of slowing every compile of the job."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from pwdeploy.local.env import GCSFS_EMULATOR_ENV, local_env, plan, without_compile_cache
from pwdeploy.local.gcs_cache import cache_problem, split_uri
from tests import gcs_emulator as emulator
from tests.conftest import REPO
from tests.gcs_emulator import GcsEmulator
from tests.test_local_env import job

gcs_emulator = emulator.gcs_emulator

EXAMPLE = REPO / "examples" / "data_parallel" / "job.yaml"
PRINT_ENV = "import json, os; print(json.dumps(dict(os.environ)))"
INHERITED = ("STORAGE_EMULATOR_HOST", "GOOGLE_APPLICATION_CREDENTIALS", "GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT")


@pytest.fixture
def clean_env(tmp_path: Path) -> dict[str, str]:
    """The caller's environment with no Google credentials: an empty home and gcloud config, no ADC file, and
    no GCE metadata lookup (so the result does not depend on the network around the machine)."""
    home = tmp_path / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in INHERITED and not k.startswith("FSSPEC_")}
    env.update({"HOME": str(home), "CLOUDSDK_CONFIG": str(home / "gcloud"), "NO_GCE_CHECK": "true"})
    return env


def fake_adc(tmp_path: Path) -> str:
    """Application Default Credentials that can never be refreshed, as on a laptop that is offline."""
    path = tmp_path / "adc.json"
    adc = {
        "type": "authorized_user",
        "client_id": "x.apps.googleusercontent.com",
        "client_secret": "x",
        "refresh_token": "not-a-token",
    }
    path.write_text(json.dumps(adc), encoding="utf-8")
    return str(path)


def local_run(cache: str, env: dict[str, str], tmp_path: Path, *command: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable, "-m", "pwdeploy", "local", "run", "-f", str(EXAMPLE), "--devices", "2",
            "--compile-cache", cache, "--local-hlo-dir", str(tmp_path / "hlo"), "--", *command,
        ],
        cwd=EXAMPLE.parent, env=env, capture_output=True, text=True, timeout=90,
    )  # fmt: skip


def train(cache: str, env: dict[str, str], tmp_path: Path) -> dict[str, Any]:
    done = local_run(cache, env, tmp_path, "python3", "train.py", "--steps", "5")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "compile cache" not in done.stderr, done.stderr[-3000:]
    assert "Error reading persistent compilation cache" not in done.stderr, done.stderr[-3000:]
    result: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    return result


def child_env(done: subprocess.CompletedProcess[str]) -> dict[str, str]:
    assert done.returncode == 0, done.stderr[-3000:]
    env: dict[str, str] = json.loads(done.stdout.splitlines()[-1])
    return env


@pytest.mark.gcs
@pytest.mark.slow
def test_gcs_cache_on_the_emulator_is_written_then_reused(
    gcs_emulator: GcsEmulator, clean_env: dict[str, str], tmp_path: Path
) -> None:
    bucket = gcs_emulator.create_bucket()
    cache = f"gs://{bucket}/jax-cache"
    env = {**clean_env, "STORAGE_EMULATOR_HOST": gcs_emulator.url}
    assert gcs_emulator.list_objects(bucket) == []

    first = train(cache, env, tmp_path)
    written = set(gcs_emulator.list_objects(bucket))
    assert written, "the first run wrote no compile-cache entries to the bucket"
    assert all(name.startswith("jax-cache/") and name.endswith("-cache") for name in written), written
    assert any(name.startswith("jax-cache/jit_step-") for name in written), "the training step was not cached"

    # Second run as a developer with (offline) Application Default Credentials: gcsfs must still talk to the
    # emulator anonymously, and must not try the emulator over gRPC (a 60 s stall per lookup).
    second = train(cache, {**env, "GOOGLE_APPLICATION_CREDENTIALS": fake_adc(tmp_path)}, tmp_path)
    assert set(gcs_emulator.list_objects(bucket)) == written  # every compile of the second run was a cache hit
    assert second["final_loss"] == first["final_loss"]


@pytest.mark.gcs
def test_a_missing_bucket_turns_the_cache_off_in_one_line(
    gcs_emulator: GcsEmulator, clean_env: dict[str, str], tmp_path: Path
) -> None:
    env = {**clean_env, "STORAGE_EMULATOR_HOST": gcs_emulator.url}
    done = local_run("gs://pwd-no-such-bucket/cache", env, tmp_path, "python3", "-c", PRINT_ENV)
    seen = child_env(done)
    off = [line for line in done.stderr.splitlines() if "compile cache" in line]
    assert off == [
        "warning: compile cache gs://pwd-no-such-bucket/cache is off for this run: bucket pwd-no-such-bucket does "
        "not exist (--compile-cache DIR keeps a local one)"
    ]
    assert seen["JAX_ENABLE_COMPILATION_CACHE"] == "false"
    assert not {"JAX_COMPILATION_CACHE_DIR", *GCSFS_EMULATOR_ENV} & set(seen)


def test_no_credentials_and_no_emulator_turn_the_cache_off(clean_env: dict[str, str], tmp_path: Path) -> None:
    done = local_run("gs://some-bucket/cache", clean_env, tmp_path, "python3", "-c", PRINT_ENV)
    seen = child_env(done)
    off = [line for line in done.stderr.splitlines() if "compile cache" in line]
    assert len(off) == 1 and "is off for this run: no Google credentials found" in off[0], done.stderr
    assert "gcloud auth application-default login" in off[0]
    assert seen["JAX_ENABLE_COMPILATION_CACHE"] == "false" and "JAX_COMPILATION_CACHE_DIR" not in seen


def test_emulator_settings_for_gcsfs_only_with_a_gcs_cache_and_an_emulator() -> None:
    emulator_host = {"STORAGE_EMULATOR_HOST": "http://127.0.0.1:9"}
    env = local_env(job(), 1, hlo_dir=None, compile_cache="gs://bkt/c", environ=emulator_host)
    assert {k: env[k] for k in GCSFS_EMULATOR_ENV} == {
        "GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT": "false",
        "FSSPEC_GS_TOKEN": "anon",
    }
    assert not set(GCSFS_EMULATOR_ENV) & set(local_env(job(), 1, hlo_dir=None, compile_cache="gs://bkt/c", environ={}))
    assert not set(GCSFS_EMULATOR_ENV) & set(
        local_env(job(), 1, hlo_dir=None, compile_cache="/tmp/cache", environ=emulator_host)
    )
    chosen = {**emulator_host, "GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT": "true"}  # the caller's own choice stands
    env = local_env(job(), 1, hlo_dir=None, compile_cache="gs://bkt/c", environ=chosen)
    assert "GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT" not in env and env["FSSPEC_GS_TOKEN"] == "anon"


def test_without_compile_cache_turns_jax_cache_off() -> None:
    emulator = {"STORAGE_EMULATOR_HOST": "h:1"}
    on = plan(job(local__compile_cache="gs://bkt/c"), cwd=Path.cwd(), cores=64, environ=emulator)
    off = without_compile_cache(on)
    assert on.compile_cache == "gs://bkt/c" and off.compile_cache is None
    assert off.env["JAX_ENABLE_COMPILATION_CACHE"] == "false"
    assert not any(k.startswith(("JAX_COMPILATION", "JAX_PERSISTENT", "GCSFS_", "FSSPEC_")) for k in off.env)
    assert {k: v for k, v in off.env.items() if k != "JAX_ENABLE_COMPILATION_CACHE"} == {
        k: v for k, v in on.env.items() if k in off.env
    }


def test_split_uri() -> None:
    assert split_uri("gs://bkt") == ("bkt", "")
    assert split_uri("gs://bkt/") == ("bkt", "")
    assert split_uri("gs://bkt/a/b/") == ("bkt", "a/b/")


class DenyingClientStub:
    """A storage client stub whose listing is refused, as GCS answers without storage.objects.list (the
    emulator grants everything)."""

    def list_blobs(self, *_args: Any, **_kwargs: Any) -> Any:
        from google.api_core import exceptions

        raise exceptions.Forbidden("caller does not have storage.objects.list access")


def test_refused_listing_names_the_permissions_stub_client() -> None:
    problem = cache_problem("gs://bkt/cache", client_factory=DenyingClientStub)
    assert problem is not None
    assert problem.startswith("listing gs://bkt was refused (403 caller does not have storage.objects.list access)")
    assert problem.endswith("the cache needs storage.objects.list, get and create")
