"""A local run never writes to production storage: every gs:// the job names (command, main.env, the config files
its command names) goes to a real GCS emulator whose objects are files under .pwdeploy/gcs, proved with real
processes for each client a JAX program writes with (google-cloud-storage, gcsfs through etils.epath, Orbax with
tensorstore), and the job's Google credentials are withheld from the clients that ignore those hooks."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from pwdeploy.config import load_job
from pwdeploy.errors import LocalRunError
from pwdeploy.local import gcs_redirect
from pwdeploy.local.env import plan
from tests.jobfiles import write_job

PROGRAMS = Path(__file__).resolve().parent / "programs"
OUT = "gs://prod-bucket/run-1"


def local_run(job: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pwdeploy", "local", "run", "-f", str(job), "--no-limits-check", "--no-check", *args],
        cwd=job.parent, capture_output=True, text=True, timeout=120, check=False, env=env,
    )  # fmt: skip


def writer_job(folder: Path) -> Path:
    command = f"python3 {PROGRAMS / 'gcs_writer.py'} base_output_directory={OUT}"
    return write_job(folder, "gcs-writer", main={"image": "r.example/m:1", "command": command}, local={"devices": 1})


@pytest.mark.slow
def test_every_client_writes_the_named_bucket_into_local_files(tmp_path: Path) -> None:
    job = writer_job(tmp_path)
    done = local_run(job)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[-1]) == {"wrote": OUT, "restored": True}
    bucket = tmp_path / ".pwdeploy" / "gcs" / "prod-bucket"
    assert (bucket / "run-1" / "metrics.txt").read_text() == "loss 1.0\n"  # google-cloud-storage
    assert (bucket / "run-1" / "config.txt").read_text() == "steps=1\n"  # gcsfs through etils.epath
    assert list((bucket / "run-1" / "checkpoints" / "1").rglob("*.ocdbt")), "no tensorstore data"  # Orbax
    said = f"pwdeploy local: gs://prod-bucket ({OUT} in main.command) goes to a local GCS emulator (http://127.0.0.1:"
    assert said in done.stderr and f"its objects are files in {bucket}" in done.stderr
    again = local_run(job)
    assert again.returncode == 0 and "an earlier run's objects were cleared (--resume keeps them)" in again.stderr
    kept = local_run(job, "--resume")
    assert kept.returncode == 0 and "cleared" not in kept.stderr
    assert sorted(p.name for p in (bucket / "run-1" / "checkpoints").iterdir()) == ["1"]


CREDENTIALS = """\
import google.auth
try:
    credentials, project = google.auth.default()
    print("found", type(credentials).__name__)
except google.auth.exceptions.DefaultCredentialsError:
    print("none")
"""


def test_the_job_s_google_credentials_are_withheld(tmp_path: Path) -> None:
    home = tmp_path / "home"
    adc = home / ".config" / "gcloud" / "application_default_credentials.json"
    adc.parent.mkdir(parents=True)
    user = {"type": "authorized_user", "client_id": "c", "client_secret": "s", "refresh_token": "r"}
    adc.write_text(json.dumps(user), encoding="utf-8")
    (tmp_path / "creds.py").write_text(CREDENTIALS, encoding="utf-8")
    env = {"HOME": str(home), "PATH": "/usr/bin:/bin", "GOOGLE_APPLICATION_CREDENTIALS": str(adc)}
    plain = subprocess.run([sys.executable, "creds.py"], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert plain.stdout.strip() == "found Credentials"  # what the job would use without the fence
    main = {"image": "r.example/m:1", "command": "python3 creds.py", "env": {"OUT": f"{OUT}/x"}}
    done = local_run(write_job(tmp_path, "creds", main=main, local={"devices": 1}), env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "none"
    assert f"({OUT}/x in main.env.OUT)" in done.stderr


def test_the_named_locations_are_read_from_the_command_env_and_config_files(tmp_path: Path) -> None:
    (tmp_path / "configs").mkdir()
    (tmp_path / "configs" / "base.yml").write_text("run: x\ndataset_path: gs://data-bucket/c4  # read\n")
    command = "python3 -m trainer.train configs/base.yml base_output_directory=gs://out-bucket/r"
    main = {"image": "r.example/m:1", "command": command, "env": {"LOGS": "gs://log-bucket"}}
    storage = {"scratch": "gs://scratch-bucket/p", "checkpoints": "gs://ckpt-bucket/c"}
    job = load_job(write_job(tmp_path, "named", main=main, storage=storage), {}, installed_jax=lambda: "0.10.2")
    found = plan(job, cwd=tmp_path, cores=2).gcs
    assert [(n.uri, n.where) for n in found] == [
        ("gs://out-bucket/r", "main.command"),
        ("gs://log-bucket", "main.env.LOGS"),
        ("gs://data-bucket/c4", "configs/base.yml"),
    ]  # storage.* are local folders already; the scratch location is the cluster's, never the job's


def test_a_job_that_names_no_gs_location_gets_no_emulator(tmp_path: Path) -> None:
    said: list[str] = []
    with gcs_redirect.redirected([], [], tmp_path / "gcs", fresh=True, say=said.append) as env:
        assert env == {}
    assert said == [] and not (tmp_path / "gcs").exists()


def test_without_an_emulator_the_run_is_refused_with_the_fix(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gcs_redirect, "emulator_available", lambda: False)
    named = [gcs_redirect.Named(OUT, "prod-bucket", "main.command")]
    with pytest.raises(LocalRunError) as refused, gcs_redirect.redirected(named, [], tmp_path, fresh=True, say=print):
        pass
    assert "never writes to production storage" in str(refused.value) and "local paths after --" in str(
        refused.value.hint
    )


def test_examples_in_a_config_file_s_comments_name_no_bucket(tmp_path: Path) -> None:
    (tmp_path / "base.yml").write_text(
        '# e.g. gs://my-outputs/run\nout: "" # e.g. "gs://my-dataset/"\nkept: "gs://real-bucket/x # not a comment"\n'
    )
    main = {"image": "r.example/m:1", "command": "python3 train.py base.yml"}
    job = load_job(write_job(tmp_path, "comments", main=main), {}, installed_jax=lambda: "0.10.2")
    assert [n.uri for n in plan(job, cwd=tmp_path, cores=2).gcs] == ["gs://real-bucket/x"]


MAKES_FOLDER = """\
from etils import epath

folder = epath.Path("gs://prod-bucket/run-1/checkpoints")
folder.mkdir(parents=True, exist_ok=True)
print(folder.exists(), folder.is_dir(), list(folder.iterdir()))
"""


@pytest.mark.slow
def test_a_folder_epath_made_exists_as_tensorflow_s_client_has_it(tmp_path: Path) -> None:
    """With TensorFlow in the job's environment (a stand-in package here: etils only looks it up), epath's gs://
    would be tf.io.gfile's, which leaves a folder that exists; locally it is gcsfs's, which does not, unless the
    probe keeps the folder (MaxText checks its checkpoint folder right after making it)."""
    (tmp_path / "stand_in" / "tensorflow").mkdir(parents=True)
    (tmp_path / "stand_in" / "tensorflow" / "__init__.py").write_text("")
    (tmp_path / "folder.py").write_text(MAKES_FOLDER)
    env = {"image": "r.example/m:1", "command": f"python3 folder.py {OUT}", "env": {"PYTHONPATH": "stand_in"}}
    done = local_run(write_job(tmp_path, "folders", main=env, local={"devices": 1}))
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "True True []"


@pytest.mark.parametrize("word", ["--config=configs/run.yaml", "config=configs/run.yaml", "configs/run.yaml"])
def test_a_config_file_given_as_a_flag_s_value_is_read(tmp_path: Path, word: str) -> None:
    """absl and argparse take --config=FILE: its gs:// goes to the emulator as a positional file's does."""
    (tmp_path / "configs").mkdir()
    (tmp_path / "configs" / "run.yaml").write_text("workdir: gs://prod-bucket/run-7\n")
    main = {"image": "r.example/m:1", "command": f"python3 train.py {word}"}
    job = load_job(write_job(tmp_path, "flagged", main=main), {}, installed_jax=lambda: "0.10.2")
    found = plan(job, cwd=tmp_path, cores=2).gcs
    assert [(n.uri, n.where) for n in found] == [("gs://prod-bucket/run-7", "configs/run.yaml")]
