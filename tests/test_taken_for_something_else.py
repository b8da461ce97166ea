"""Input that would be taken for something else: each case is one row, run through the installed `pwdeploy` command
as a user runs it (a fresh process, the console script of this environment): a refusal naming the field or flag and
the fix, with the documented exit code and no traceback, or the value kept as written."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any, NamedTuple

import pytest
import yaml

from pwdeploy.config.values import parse_command
from pwdeploy.errors import ConfigError
from tests.jobfiles import BASE

PWDEPLOY = Path(sys.executable).parent / "pwdeploy"  # the console script pip installed beside this Python


class Case(NamedTuple):
    args: tuple[str, ...]  # after `pwdeploy`; {job} is the job file, {dir} its folder
    exit_code: int
    said: tuple[str, ...]  # each is in stderr
    job: Mapping[str, Any] = MappingProxyType({})  # fields over the base job (whole sections)
    job_text: str = ""  # YAML lines appended to the base job as written (comments, unquoted scalars)
    env: Mapping[str, str] = MappingProxyType({})
    prepare: Callable[[Path], object] | None = None  # makes more files in the job's folder
    check: Callable[[Path, subprocess.CompletedProcess[str]], None] | None = None  # what must (not) have happened


def _job_yaml(case: Case) -> str:
    base = {
        "name": "taken",
        **BASE,
        "allow_version_mismatch": True,  # whatever jax this environment has
        "main": {"image": "r.example/m:1", "command": "python3 train.py"},
    }
    for key, value in case.job.items():
        if value is None:  # given in job_text instead
            del base[key]
        else:
            base[key] = value
    return yaml.safe_dump(base) + case.job_text


def _rendered_env(folder: Path, done: subprocess.CompletedProcess[str]) -> None:
    objects = list(yaml.safe_load_all(done.stdout))
    (jobset,) = [o for o in objects if o and o["kind"] == "JobSet"]
    head = jobset["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    containers = head.get("initContainers", []) + head["containers"]
    (main,) = [c for c in containers if c["name"] == "main"]
    env = {item["name"]: item.get("value") for item in main["env"]}
    assert env["DEBUG"] == "yes" and env["UMASK"] == "0755" and env["LR"] == "1e-3", env
    assert main["command"] == ["python3", "train.py", "--seed", "0755"], main["command"]


def _no_gs_folder(folder: Path, done: subprocess.CompletedProcess[str]) -> None:
    assert not (folder / "gs:").exists() and not (folder.parent / "gs:").exists()


def _tpu_request_of_3(folder: Path) -> None:
    rendered = subprocess.run(
        [str(PWDEPLOY), "render", "-f", str(folder / "job.yaml")], capture_output=True, text=True, check=True
    )
    objects = list(yaml.safe_load_all(rendered.stdout))
    (jobset,) = [o for o in objects if o and o["kind"] == "JobSet"]
    worker = jobset["spec"]["replicatedJobs"][1]["template"]["spec"]["template"]["spec"]["containers"][0]
    worker["resources"]["limits"]["google.com/tpu"] = "3"
    worker["resources"].setdefault("requests", {})["google.com/tpu"] = "3"
    (folder / "out.yaml").write_text(yaml.safe_dump_all(objects), encoding="utf-8")


def _dockerignore(folder: Path) -> None:
    (folder / "train.py").write_text("print('hi')\n", encoding="utf-8")
    (folder / ".dockerignore").write_text("*.pyc\n[z-a]\n", encoding="utf-8")


def _kubeconfig(folder: Path) -> None:
    (folder / "kubeconfig").write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:9"}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "here", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "here",
            }
        ),
        encoding="utf-8",
    )


SHELL = ("main.command", "runs without a shell", "bash, -c")
CASES: dict[str, Case] = {
    "command with a pipe": Case(
        ("render", "-f", "{job}"),
        2,
        (*SHELL, "'|'"),
        job={"main": {"image": "r.example/m:1", "command": "python3 train.py | tee log.txt"}},
    ),
    "command with &&": Case(
        ("render", "-f", "{job}"),
        2,
        (*SHELL, "'&&'"),
        job={"main": {"image": "r.example/m:1", "command": "cd . && python3 train.py"}},
    ),
    "command with a variable": Case(
        ("render", "-f", "{job}"),
        2,
        (*SHELL, "$H"),
        job={"main": {"image": "r.example/m:1", "command": "python3 train.py --out $HOME/x"}},
    ),
    "local run of a command with a pipe": Case(
        ("local", "run", "-f", "{job}"),
        2,
        (*SHELL, "'|'"),
        job={"main": {"image": "r.example/m:1", "command": "python3 train.py | tee log.txt"}},
        check=lambda folder, done: None if not (folder / "log.txt").exists() else pytest.fail("log.txt was made"),
    ),
    "two-line command block": Case(
        ("render", "-f", "{job}"),
        2,
        ("main.command", "is 2 lines", "bash run.sh"),
        job={"main": {"image": "r.example/m:1", "command": "python3 prepare.py\npython3 train.py\n"}},
    ),
    "#1 after an unquoted command": Case(
        ("render", "-f", "{job}"),
        2,
        ("main.command", "'#1'", "YAML reads as a comment", 'command: "python3 train.py --tag #1"'),
        job={"main": None},
        job_text="main:\n  image: r.example/m:1\n  command: python3 train.py --tag #1\n",
    ),
    "compile cache gs:/ with one slash": Case(
        ("local", "run", "-f", "{job}", "--compile-cache", "gs:/bucket/x"),
        2,
        ("local.compile_cache", "gs://bucket/x", "--compile-cache"),
        check=_no_gs_folder,
    ),
    "proxy memory without a unit": Case(
        ("render", "-f", "{job}"), 2, ("head.proxy_memory", "100 bytes", "100Gi"), job={"head": {"proxy_memory": 100}}
    ),
    "main memory without a unit": Case(
        ("render", "-f", "{job}", "--main-memory", "32"), 2, ("main.memory", "32 bytes", "32Gi", "--main-memory")
    ),
    "shm size 512m, milli for mega": Case(
        ("render", "-f", "{job}", "--shm-size", "512m"),
        2,
        ("main.shm_size", "0.512 bytes", "m is milli", "512Mi", "512M", "--shm-size"),
    ),
    "shm size 512m in the file, before a local run": Case(
        ("local", "run", "-f", "{job}", "--no-check", "--", "python3", "-c", "print('ran')"),
        2,
        ("main.shm_size", "0.512 bytes", "tmpfs of one page", "512Mi"),
        job={"main": {"image": "r.example/m:1", "command": "python3 train.py", "shm_size": "512m"}},
        check=lambda folder, done: None if "ran" not in done.stdout else pytest.fail("the job ran"),
    ),
    "worker memory 1e-3": Case(
        ("render", "-f", "{job}"),
        2,
        ("tpu.worker_memory", "0.001 bytes", "whole number of bytes"),
        job={"tpu": {"type": "v5p-8", "worker_memory": "1e-3"}},
    ),
    "env value with a NUL": Case(
        ("render", "-f", "{job}"),
        2,
        ("main.env.A", "NUL character", "execve"),
        job={"main": {"image": "r.example/m:1", "command": "python3 train.py", "env": {"A": "x\x00y"}}},
    ),
    "env value with a NUL, before a local run": Case(
        ("local", "run", "-f", "{job}", "--no-check", "--", "python3", "-c", "print('ran')"),
        2,
        ("main.env.A", "NUL character"),
        job={"main": {"image": "r.example/m:1", "command": "python3 train.py", "env": {"A": "x\x00y"}}},
    ),
    "env value longer than the kernel passes": Case(
        ("render", "-f", "{job}"),
        2,
        ("main.env.A", "200002 bytes", "MAX_ARG_STRLEN", "E2BIG", "in a file"),
        job={"main": {"image": "r.example/m:1", "command": "python3 train.py", "env": {"A": "x" * 200_000}}},
    ),
    "a one-word command of 800 kB": Case(
        ("render", "-f", "{job}"),
        2,
        ("main.command", "800000 characters", "list of words"),
        job={"main": {"image": "r.example/m:1", "command": "a" * 800_000}},
    ),
    "a command word with a NUL": Case(
        ("render", "-f", "{job}"),
        2,
        ("main.command", "word 2", "NUL character"),
        job={"main": {"image": "r.example/m:1", "command": ["python3", "a\x00b"]}},
    ),
    "a config file of 2 MiB": Case(
        ("render", "-f", "{job}"),
        2,
        ("is more than 1 MiB: not a job config", "-f names the job's YAML file"),
        job_text="#" + "x" * (2 << 20) + "\n",
    ),
    "env yes, 0755 and 1e-3 kept as written": Case(
        ("render", "-f", "{job}", "--no-validate"),
        0,
        (),
        job={"main": None},
        job_text="main:\n  image: r.example/m:1\n  command: [python3, train.py, --seed, 0755]\n"
        "  env: {DEBUG: yes, UMASK: 0755, LR: 1e-3}\n",
        check=_rendered_env,
    ),
    "stale PWDEPLOY_NAME": Case(
        ("render", "-f", "{job}"),
        0,
        ("warning: PWDEPLOY_NAME='old-job' replaces name: 'taken'", "unset PWDEPLOY_NAME"),
        env={"PWDEPLOY_NAME": "old-job"},
    ),
    "PWDEPLOY_KUBECONFIG read": Case(
        ("list",),
        2,
        ("--kubeconfig", "missing-kubeconfig", "does not exist"),
        env={"PWDEPLOY_KUBECONFIG": "{dir}/missing-kubeconfig"},
    ),
    "PWDEPLOY_CONTEXT read": Case(
        ("list",),
        2,
        ("'elsewhere'",),
        env={"PWDEPLOY_KUBECONFIG": "{dir}/kubeconfig", "PWDEPLOY_CONTEXT": "elsewhere"},
        prepare=_kubeconfig,
    ),
    "image source folder /": Case(
        ("image", "dockerfile", "-f", "{job}"),
        2,
        ("image.source_dir", "/ is a system folder", "folder that holds the program"),
        job={"image": {"source_dir": "/"}},
    ),
    "dockerignore [z-a]": Case(
        ("image", "dockerfile", "-f", "{job}"),
        2,
        ("image.source_dir", ".dockerignore line 2: '[z-a]'", "syntax error", "[a-z]"),
        prepare=_dockerignore,
    ),
    "validate google.com/tpu 3 on a 4-chip VM": Case(
        ("validate", "{dir}/out.yaml"),
        3,
        ("google.com/tpu", "'3' chips", "4 chips each", "request 4"),
        prepare=_tpu_request_of_3,
    ),
    "retry exit code 137": Case(
        ("render", "-f", "{job}", "--retry-exit-code", "137"),
        2,
        ("scheduling.retry_exit_codes", "OOM killer", "main.memory"),
    ),
    "flex-start on a multi-host slice": Case(
        ("render", "-f", "{job}", "--capacity", "flex-start", "--tpu-type", "v5p-16"),
        0,
        ("warning: tpu.capacity flex-start with a v5p-16 slice of 2 VMs", "--capacity queued"),
    ),
    "flex-start on a single-host slice says nothing of hosts": Case(
        ("render", "-f", "{job}", "--capacity", "flex-start"),
        0,
        (),
        check=lambda folder, done: None if "multi" not in done.stderr else pytest.fail(done.stderr),
    ),
    "MTC settings without mtc.enabled": Case(
        ("render", "-f", "{job}", "--mtc-backup-steps", "100", "--mtc-ramdisk-dir", "/ramdisk"),
        0,
        ("warning: mtc.ramdisk_dir, mtc.backup_interval_steps are set but mtc.enabled is false", "--mtc"),
    ),
    "MTC enabled says nothing of its settings": Case(
        ("render", "-f", "{job}", "--mtc", "--mtc-backup-steps", "100", "--sidecar-image", "r.example/side:1"),
        0,
        (),
        check=lambda folder, done: None if "mtc.enabled is false" not in done.stderr else pytest.fail(done.stderr),
    ),
    "sidecar source folder holding the config": Case(
        ("render", "-f", "{job}", "--no-validate"),
        0,
        ("warning: sidecar.source_dir", "holds the config file job.yaml", "add the line job.yaml to"),
        job={"sidecar": {"image": "r.example/side:1", "source_dir": "."}},
        prepare=lambda folder: (folder / "worker.py").write_text("print(1)\n", encoding="utf-8"),
    ),
    "sidecar source folder that leaves the config out": Case(
        ("render", "-f", "{job}", "--no-validate"),
        0,
        (),
        job={"sidecar": {"image": "r.example/side:1", "source_dir": "."}},
        prepare=lambda folder: (folder / ".dockerignore").write_text("job.yaml\n", encoding="utf-8"),
        check=lambda folder, done: None if "sidecar.source_dir" not in done.stderr else pytest.fail(done.stderr),
    ),
    "max run duration 30s": Case(
        ("render", "-f", "{job}", "--capacity", "flex-start", "--max-run-duration", "30s"),
        2,
        ("tpu.max_run_duration", "at least 10 minutes"),
    ),
    "max restarts 1000000": Case(
        ("render", "-f", "{job}", "--max-restarts", "1000000"), 2, ("scheduling.max_restarts", "crash loop")
    ),
    "main cpu 1000": Case(
        ("render", "-f", "{job}", "--main-cpu", "1000"), 2, ("main.cpu", "1000 CPUs", "1000m is 1 CPU")
    ),
    "one data worker on half a CPU": Case(
        ("render", "-f", "{job}", "--data-workers", "1", "--main-cpu", "0.5"),
        2,
        ("main.data_workers", "CPU limit (0.5)", "use 0"),
    ),
    "HLO dump flag without a destination": Case(
        ("render", "-f", "{job}", "--xla-flag", "--xla_dump_hlo_as_text=true"),
        0,
        (
            "warning: xla_flags: --xla_dump_hlo_as_text says how to dump HLO but not where",
            "--hlo-dump",
            "--xla_dump_to=-",
        ),
    ),
    "PWDEPLOY_ENV set": Case(
        ("render", "-f", "{job}"),
        0,
        ("warning: PWDEPLOY_ENV is set but not read: --env is repeatable", "--env KEY=VALUE"),
        env={"PWDEPLOY_ENV": "A=1"},
    ),
    "PWDEPLOY_TPU_NODE_SELECTOR set": Case(
        ("render", "-f", "{job}"),
        0,
        ("warning: PWDEPLOY_TPU_NODE_SELECTOR is set but not read", "--tpu-node-selector KEY=VALUE"),
        env={"PWDEPLOY_TPU_NODE_SELECTOR": "team=ml"},
    ),
}


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_installed_cli(case: Case, tmp_path: Path) -> None:
    folder = tmp_path / "job"
    folder.mkdir()
    job = folder / "job.yaml"
    job.write_text(_job_yaml(case), encoding="utf-8")
    if case.prepare is not None:
        case.prepare(folder)
    names = {"job": str(job), "dir": str(folder)}
    env = {key: value for key, value in os.environ.items() if not key.startswith("PWDEPLOY_")}
    env |= {"KUBECONFIG": str(tmp_path / "no-kubeconfig"), "HOME": str(tmp_path)}
    env |= {key: value.format(**names) for key, value in case.env.items()}
    done = subprocess.run(
        [str(PWDEPLOY), *(arg.format(**names) for arg in case.args)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )
    assert done.returncode == case.exit_code, done.stderr
    for words in case.said:
        assert words in done.stderr, done.stderr
    assert "Traceback" not in done.stderr and "internal error" not in done.stderr, done.stderr
    if case.check is not None:
        case.check(folder, done)


@pytest.mark.parametrize(
    ("command", "words"),
    [
        ("python3 -c 'import sys; print(sys.argv)' a|b", None),
        ("python3 -c 'import sys; print(sys.argv)' 'a|b'", ("python3", "-c", "import sys; print(sys.argv)", "a|b")),
        ('python3 train.py --tag "#1" --name "a && b"', ("python3", "train.py", "--tag", "#1", "--name", "a && b")),
        ("python3 train.py --sep \\;", ("python3", "train.py", "--sep", ";")),
        ("python3 train.py --out '$HOME'", ("python3", "train.py", "--out", "$HOME")),
        ('python3 train.py --out "$HOME"', None),  # a shell expands it inside double quotes
        ("python3 train.py --cost 5$", ("python3", "train.py", "--cost", "5$")),
        ("python3 train.py --price $5", None),  # a shell's fifth positional parameter: empty
        ("python3 train.py --home ~/x", None),
        ("python3 train.py --pattern a~b", ("python3", "train.py", "--pattern", "a~b")),
        ("python3 train.py \\\n  --steps 10\n", ("python3", "train.py", "--steps", "10")),  # a continued line
    ],
)
def test_a_command_string_is_words_or_refused(command: str, words: tuple[str, ...] | None) -> None:
    if words is None:
        with pytest.raises(ConfigError, match="runs without a shell"):
            parse_command(command, "main.command")
    else:
        assert parse_command(command, "main.command") == words
