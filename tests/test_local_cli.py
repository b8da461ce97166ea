"""`pwdeploy local run` and `pwdeploy local env` as users call them (real child processes, no jax needed)."""

from __future__ import annotations

import importlib.util
import json
import os
import shlex
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest
from click.testing import CliRunner

from pwdeploy.cli import cli
from tests.conftest import REPO
from tests.job_processes import in_folder

EXAMPLE = str(REPO / "examples" / "data_parallel" / "job.yaml")
PRINT_ENV = "import json, os; print(json.dumps({'cwd': os.getcwd(), 'env': dict(os.environ)}))"


@pytest.fixture
def job_file(tmp_path: Path) -> Path:
    """A job with a placeholder image and no bucket: enough for a local run."""
    (tmp_path / "show.py").write_text(f"{PRINT_ENV}\n", encoding="utf-8")
    path = tmp_path / "job.yaml"
    path.write_text(
        textwrap.dedent(
            """\
            name: cli-test
            pathways_version: 0.10.2
            tpu: {type: v5p-8}
            main: {image: "registry.example/none:0", command: python3 show.py}
            storage: {scratch: gs://bkt/s}
            xla_flags: [--xla_tpu_enable_async_collective_fusion=true, --xla_dump_hlo_as_text=true]
            """
        ),
        encoding="utf-8",
    )
    return path


def pwdeploy(*args: str, cwd: Path, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pwdeploy", *args], cwd=cwd, capture_output=True, text=True, timeout=timeout
    )


def test_run_passes_stdout_stderr_and_exit_status_through(job_file: Path, tmp_path: Path) -> None:
    code = "import sys; print('to stdout'); print('to stderr', file=sys.stderr); sys.exit(3)"
    done = pwdeploy("local", "run", "-f", str(job_file), "--", "python3", "-c", code, cwd=tmp_path)
    assert done.returncode == 3
    assert done.stdout == "to stdout\n"
    assert "to stderr" in done.stderr
    assert done.stderr.strip().splitlines()[-1] == "pwdeploy local: the job exited with status 3"


def test_config_command_runs_beside_the_config_with_the_env_that_local_env_prints(
    job_file: Path, tmp_path: Path
) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    done = pwdeploy("local", "run", "-f", str(job_file), "--devices", "2", cwd=elsewhere)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.splitlines()[-1])
    assert seen["cwd"] == str(tmp_path)
    printed = pwdeploy("local", "env", "-f", str(job_file), "--devices", "2", cwd=elsewhere)
    exports = dict(
        shlex.split(line)[1].split("=", 1) for line in printed.stdout.splitlines() if line.startswith("export ")
    )
    assert exports["JAX_PLATFORMS"] == "cpu" and exports["PJRT_NPROC"] == "4"
    assert {k: seen["env"][k] for k in exports} == exports
    assert "JAX_BACKEND_TARGET" not in seen["env"]
    assert "--xla_tpu_enable_async_collective_fusion=true" in done.stderr  # named in the warning
    assert printed.stdout.splitlines()[-1] == f"# cd {tmp_path} && {sys.executable} show.py"


def test_override_runs_in_the_current_directory(job_file: Path, tmp_path: Path) -> None:
    here = tmp_path / "here"
    here.mkdir()
    done = pwdeploy("local", "run", "-f", str(job_file), "--", "python3", "-c", PRINT_ENV, cwd=here)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["cwd"] == str(here)


def test_env_output_is_shell_exportable(job_file: Path, tmp_path: Path) -> None:
    printed = pwdeploy("local", "env", "-f", str(job_file), "--env", "ODD=a 'b' $c", cwd=tmp_path)
    script = printed.stdout + "\nprintf '%s' \"$ODD|$XLA_FLAGS\"\n"
    shell = subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=True)
    assert shell.stdout == "a 'b' $c|--xla_force_host_platform_device_count=4 --xla_dump_hlo_as_text=true"


def test_missing_command_is_a_clear_error(job_file: Path, tmp_path: Path) -> None:
    done = pwdeploy("local", "run", "-f", str(job_file), "--", "no-such-program-xyz", "--flag", cwd=tmp_path)
    assert done.returncode == 7
    assert done.stderr.splitlines()[-2:] == [
        f"error: cannot start the job: 'no-such-program-xyz' not found on PATH (working directory {tmp_path})",
        "  hint: check main.command in the config, or the command after --",
    ]
    assert "Traceback" not in done.stderr
    assert not (tmp_path / ".pwdeploy").exists(), "a run that cannot start leaves no cache or HLO directory"


def test_absurd_device_count_and_bad_flag(runner: CliRunner, job_file: Path) -> None:
    result = runner.invoke(cli, ["local", "run", "-f", str(job_file), "--devices", "100000"])
    assert result.exit_code == 2
    assert "local.devices: 100000 emulated devices is more than a local run can emulate" in result.stderr
    result = runner.invoke(cli, ["local", "env", "-f", str(job_file), "--devices", "0"])
    assert result.exit_code == 2
    assert "local.devices: must be an integer >= 1, not '0' (from --devices)" in result.stderr


def test_many_devices_warn(runner: CliRunner, job_file: Path) -> None:
    result = runner.invoke(cli, ["local", "env", "-f", str(job_file), "--devices", "64"], obj={"cores": 3})
    assert result.exit_code == 0
    assert "warning: 64 emulated devices on 3 CPU core(s)" in result.stderr


def test_example_needs_no_real_image_or_bucket(runner: CliRunner) -> None:
    result = runner.invoke(cli, ["local", "env", "-f", EXAMPLE])
    assert result.exit_code == 0, result.output
    assert "export XLA_FLAGS='--xla_force_host_platform_device_count=8 " in result.stdout


LOOP = """
import sys, time
try:
    print("ready", flush=True)  # inside the try: a Ctrl-C right after "ready" is still handled
    time.sleep(60)
except KeyboardInterrupt:
    print("stopped cleanly", flush=True)
    sys.exit(130)
"""


def start_loop(job_file: Path, tmp_path: Path) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "pwdeploy", "local", "run", "-f", str(job_file), "--", "python3", "-c", LOOP],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
    return proc


STOPPING = (
    "pwdeploy local: stopping: SIGINT passed to the job's main process, which has 30 s to end before every "
    "process of the job is killed; Ctrl-C again kills them at once"
)


def test_ctrl_c_stops_the_job_cleanly_and_says_what_a_second_does(job_file: Path, tmp_path: Path) -> None:
    proc = start_loop(job_file, tmp_path)
    os.killpg(proc.pid, signal.SIGINT)  # what a terminal does: the whole foreground process group
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 130
    assert out == "stopped cleanly\n"
    assert STOPPING in err.splitlines()
    assert "pwdeploy local: the job was interrupted" in err and "Traceback" not in err


DEAF = "import signal, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nprint('ready', flush=True)\ntime.sleep(600)"


def test_a_second_ctrl_c_kills_a_job_that_does_not_stop_and_says_so(job_file: Path, tmp_path: Path) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "pwdeploy", "local", "run", "-f", str(job_file), "--", "python3", "-c", DEAF],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
    )  # fmt: skip
    assert proc.stdout is not None and proc.stderr is not None and proc.stdout.readline() == "ready\n"
    os.killpg(proc.pid, signal.SIGINT)
    seen: list[str] = []
    while STOPPING not in seen:  # the first was heard (a barrier, not a wait): pytest-timeout bounds it
        line = proc.stderr.readline()
        assert line, seen
        seen.append(line.rstrip("\n"))
    os.killpg(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 130
    assert "pwdeploy local: SIGINT again: killing every process of the job" in err.splitlines()
    assert in_folder(tmp_path) == []


@pytest.mark.skipif(importlib.util.find_spec("grain") is None, reason="needs grain (the example's extra)")
@pytest.mark.timeout(240)
@pytest.mark.slow
@pytest.mark.parametrize("workers", [0, 2])
def test_ctrl_c_ends_the_example_at_once_with_or_without_grain_workers(tmp_path: Path, workers: int) -> None:
    """The example says `interrupted` and exits on its own: the stop grace is longer than the test may wait, so a
    program that did not stop would fail it (pytest-timeout), not pass after the grace."""
    (tmp_path / "job.yaml").write_text(
        (REPO / "examples" / "data_parallel" / "job.yaml").read_text(encoding="utf-8")
        + "scheduling: {termination_grace_seconds: 3600}\n",
        encoding="utf-8",
    )
    train = REPO / "examples" / "data_parallel" / "train.py"
    proc = subprocess.Popen(
        [sys.executable, "-m", "pwdeploy", "local", "run", "-f", "job.yaml", "--devices", "2", "--compile-cache", "",
         "--data-workers", str(workers), "--no-check", "--", "python3", str(train), "--steps", "1000000",
         "--log-every", "1"],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
        env=dict(os.environ, PYTHONPATH=str(REPO)),
    )  # fmt: skip
    assert proc.stdout is not None
    for line in proc.stdout:  # training: past the compile, the loader's workers started
        if line.startswith("step 3:"):
            break
    os.killpg(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=200)
    assert proc.returncode == 130, err
    lines = err.splitlines()
    assert "train.py: interrupted" in lines and lines[-1] == "pwdeploy local: the job was interrupted"
    assert lines.index(STOPPING.replace("30 s", "3600 s")) < lines.index("train.py: interrupted")
    assert in_folder(tmp_path) == []


def test_sigterm_to_pwdeploy_reaches_the_job(job_file: Path, tmp_path: Path) -> None:
    proc = start_loop(job_file, tmp_path)
    proc.send_signal(signal.SIGTERM)  # pwdeploy alone, as a process supervisor would
    proc.communicate(timeout=30)
    assert proc.returncode == 128 + signal.SIGTERM


def test_gcs_checkpoints_become_a_local_directory_that_is_announced(job_file: Path, tmp_path: Path) -> None:
    code = "import os; print(os.environ['PWDEPLOY_CHECKPOINT_DIR'])"
    done = pwdeploy(
        "local", "run", "-f", str(job_file), "--checkpoint-dir", "gs://bkt/ckpt", "--", "python3", "-c", code,
        cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    local = tmp_path / ".pwdeploy" / "checkpoints"
    assert done.stdout == f"{local}\n" and local.is_dir()
    assert f"pwdeploy local: checkpoints (instead of storage.checkpoints) go to {local}" in done.stderr


def test_local_commands_keep_jax_and_pathwaysutils_out_of_pwdeploy(job_file: Path, tmp_path: Path) -> None:
    """The job imports jax; the parent `pwdeploy local` process needs neither it nor pathwaysutils."""
    code = textwrap.dedent(
        f"""\
        import sys
        from pwdeploy.cli import cli
        job = {str(job_file)!r}
        for argv in (["local", "env", "-f", job], ["local", "run", "-f", job, "--", "true"]):
            try:
                cli.main(argv)
            except SystemExit as e:
                assert e.code == 0, (argv, e.code)
        print("HEAVY", [m for m in ("jax", "jaxlib", "numpy", "pathwaysutils") if m in sys.modules], file=sys.stderr)
        """
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert "HEAVY []" in done.stderr, done.stderr


GRAIN_LOOP = """
import sys, time
import numpy as np
import grain
from pwdeploy import runtime

def slow(x):
    time.sleep(0.02)
    return np.full((256,), x, dtype=np.float32)

def batches():
    dataset = grain.MapDataset.range(100000).map(slow).batch(4).to_iter_dataset(grain.ReadOptions(num_threads=0))
    iterator = iter(dataset.mp_prefetch(grain.MultiprocessingOptions(num_workers=2, per_worker_buffer_size=2)))
    try:
        yield from iterator
    finally:
        runtime.close_data_loader(iterator)

if __name__ == "__main__":
    runtime.prepare_data_workers(2)
    try:
        for n, batch in enumerate(batches()):
            if n == 2:
                print("ready", flush=True)
    except KeyboardInterrupt:
        print("stopped", flush=True)
        sys.exit(130)
"""


def start_grain_loop(tmp_path: Path, job_file: Path) -> subprocess.Popen[str]:
    """`local run` of a Grain loop with workers, in a session of its own, once it reports ready."""
    (tmp_path / "grain_loop.py").write_text(GRAIN_LOOP, encoding="utf-8")
    proc = subprocess.Popen(
        [sys.executable, "-m", "pwdeploy", "local", "run", "-f", str(job_file), "--devices", "1",
         "--compile-cache", "", "--", "python3", "grain_loop.py"],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
    )  # fmt: skip
    assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
    return proc


@pytest.mark.skipif(importlib.util.find_spec("grain") is None, reason="needs grain (the example's extra)")
@pytest.mark.timeout(90)
@pytest.mark.slow
def test_ctrl_c_reaches_the_program_and_not_its_grain_workers(job_file: Path, tmp_path: Path) -> None:
    """Ctrl-C is passed to the job's main process alone: its Grain workers print no KeyboardInterrupt traceback,
    the program stops its loader, and no worker outlives the run."""
    proc = start_grain_loop(tmp_path, job_file)
    tree = psutil.Process(proc.pid).children(recursive=True)
    assert len(tree) >= 3, "the program and its two workers"
    os.killpg(proc.pid, signal.SIGINT)  # what a terminal does: the whole foreground process group
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert out == "stopped\n"
    assert "KeyboardInterrupt" not in err
    assert not [p.pid for p in tree if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]


def shm_in_use(processes: list[psutil.Process]) -> set[str]:
    """The /dev/shm files ``processes`` have mapped now."""
    return {m.path for p in processes for m in p.memory_maps() if m.path.startswith("/dev/shm/")}


@pytest.mark.skipif(importlib.util.find_spec("grain") is None, reason="needs grain (the example's extra)")
@pytest.mark.timeout(90)
@pytest.mark.slow
def test_sigterm_to_pwdeploy_leaves_no_grain_worker_and_no_shared_memory(job_file: Path, tmp_path: Path) -> None:
    """The program dies of SIGTERM without stopping its loader: its workers and Python's resource tracker are
    ended by pwdeploy, and the /dev/shm blocks they held are gone."""
    proc = start_grain_loop(tmp_path, job_file)
    tree = psutil.Process(proc.pid).children(recursive=True)
    held = set()
    for _ in range(50):  # the blocks move through /dev/shm batch by batch: look until some are mapped
        held = shm_in_use(tree)
        if held:
            break
        time.sleep(0.02)
    assert held, "the loader's workers pass their batches through /dev/shm"
    proc.send_signal(signal.SIGTERM)  # pwdeploy alone, as a process supervisor or `timeout` would
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 143, err
    assert err.splitlines()[-1] == "pwdeploy local: the job was stopped (SIGTERM to pwdeploy)"
    assert not [p.pid for p in tree if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    assert not [path for path in held if Path(path).exists()]


@pytest.mark.parametrize("how", [["--headless"], ["--env", "X=1"]], ids=["flag", "file"])
def test_a_headless_job_is_refused_with_exit_2_naming_the_field(
    runner: CliRunner, tmp_path: Path, how: list[str]
) -> None:
    config = tmp_path / "job.yaml"
    headless = "" if how == ["--headless"] else "headless: true\n"
    config.write_text(
        f"name: headless-test\npathways_version: 0.10.2\ntpu: {{type: v5p-8}}\n{headless}"
        'main: {image: "registry.example/none:0", command: "true"}\nstorage: {scratch: gs://bkt/s}\n'
    )
    result = runner.invoke(cli, ["local", "run", "-f", str(config), *how, "--", "true"])
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith("error: headless: a headless job has no program to run"), result.stderr
    assert "drop --headless (or headless: true in the config)" in result.stderr and "CPU devices" not in result.stderr
