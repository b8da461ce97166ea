"""What a local run says once about the job's own process: a JAX program that never calls runtime.step_done gets
no per-step figures and one line saying why, with the line to add; a program whose own compilation-cache setting
(MaxText's compilation_cache.set_cache_dir) overrides the one local run sets is told so. Real job processes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.jobfiles import write_job

OWN_CACHE = """\
import jax
from jax.experimental.compilation_cache import compilation_cache

compilation_cache.set_cache_dir("{cache}")
print(jax.jit(lambda x: x + 1)(1))
"""
STEPS = """\
import jax
from pwdeploy import runtime

step = jax.jit(lambda x: x + 1)
x = 0
for i in range(1, 4):
    x = step(x)
    runtime.step_done(i)
"""
NO_STEP_DONE = (
    "no per-step transfer figures: the program never called pwdeploy.runtime.step_done; add `runtime.step_done(step)`"
)


def local_run(folder: Path, program: str) -> str:
    (folder / "p.py").write_text(program, encoding="utf-8")
    job = write_job(folder, "notices", main={"image": "r.example/m:1", "command": "python3 p.py"}, local={"devices": 1})
    done = subprocess.run(
        [sys.executable, "-m", "pwdeploy", "local", "run", "-f", str(job), "--no-check", "--no-limits-check"],
        cwd=folder, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stderr


@pytest.mark.slow
def test_a_program_s_own_cache_and_no_step_done_are_each_said_once(tmp_path: Path) -> None:
    own = tmp_path / "own-cache"
    said = local_run(tmp_path, OWN_CACHE.format(cache=own))
    assert said.count(NO_STEP_DONE) == 1, said
    assert (
        f"the program set its own compilation cache (jax_compilation_cache_dir {own}), which overrides local run's "
        f"{tmp_path / '.pwdeploy' / 'jax-cache'} (--compile-cache)"
    ) in said
    assert list(own.iterdir())  # it cached there, as said


@pytest.mark.slow
def test_a_program_that_reports_steps_and_keeps_the_cache_gets_neither(tmp_path: Path) -> None:
    said = local_run(tmp_path, STEPS)
    assert "per training step (2 measured)" in said
    assert "step_done" not in said and "own compilation cache" not in said


def test_a_program_without_jax_is_not_told_about_steps(tmp_path: Path) -> None:
    said = local_run(tmp_path, "print('no jax here')\n")
    assert "step_done" not in said
