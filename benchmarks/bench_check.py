"""`pwdeploy check` over a generated folder of 2,000 Python files, and what `pwdeploy check` costs `render`.

1. A folder of --files modules (default 2,000), each ~120 lines of a training program's kind of code (imports
   with aliases, functions, a jitted step and a loop, a few of them with findings), checked in-process
   (``pwdeploy.check.check(None, [folder])``) --runs times: the best and the median, and per file.
2. `pwdeploy render -f examples/data_parallel/job.yaml` started --runs times from this checkout and from a
   checkout without `pwdeploy check` (--baseline DIR, e.g. a `git worktree` of an older commit), alternately, side
   by side: the medians and their ratio; and the modules `python -X importtime` shows render importing here and
   not there. Without --baseline: the check's modules among those render imports (none: render runs no check).

Usage: python3 benchmarks/bench_check.py [--files 2000] [--runs 5] [--baseline DIR]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "examples" / "data_parallel" / "job.yaml"

CLEAN = '''\
"""Module {n}: a piece of a training program."""
import functools
import os

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec as P

from pwdeploy import runtime


def loss_{n}(params, x, y):
    hidden = jnp.tanh(x @ params["w"] + params["b"])
    return jnp.mean((hidden - y) ** 2)


@functools.partial(jax.jit, donate_argnums=0)
def step_{n}(params, x, y):
    loss, grads = jax.value_and_grad(loss_{n})(params, x, y)
    return jax.tree.map(lambda p, g: p - 0.1 * g, params, grads), loss


def train_{n}(params, batches, mesh, log_every=100):
    sharding = NamedSharding(mesh, P("data"))
    loss = None
    for i, (x, y) in enumerate(batches, start=1):
        x, y = jax.device_put(x, sharding), jax.device_put(y, sharding)
        params, loss = step_{n}(params, x, y)
        if i % log_every == 0:
            print(i, float(loss))
        runtime.step_done(i)
    return params, None if loss is None else float(loss)


def workers_{n}():
    return runtime.data_workers()


def shapes_{n}(tree):
    return {{k: np.shape(v) for k, v in tree.items()}}


class Config{n}:
    def __init__(self, steps=10, batch=64):
        self.steps = steps
        self.batch = batch
        self.path = os.environ.get("DATA", "/tmp/data")

    def describe(self):
        return f"steps={{self.steps}} batch={{self.batch}}"
'''
WITH_FINDINGS = """
def shard_{n}(ds):
    return ds.shard(jax.process_count(), jax.process_index())


def count_{n}():
    return os.cpu_count()
"""


def make_folder(root: Path, files: int) -> None:
    for n in range(files):
        package = root / f"pkg{n // 100}"
        package.mkdir(exist_ok=True)
        text = CLEAN.format(n=n) * 2 + (WITH_FINDINGS.format(n=n) if n % 10 == 0 else "")
        (package / f"mod{n}.py").write_text(text, encoding="utf-8")


def time_check(folder: Path, runs: int) -> tuple[list[float], int, int]:
    from pwdeploy.check import check

    seconds: list[float] = []
    report = None
    for _ in range(runs):
        start = time.perf_counter()
        report = check(None, [folder], cwd=folder)
        seconds.append(time.perf_counter() - start)
    assert report is not None
    return seconds, len(report.files), len(report.findings)


def render_seconds(checkout: Path) -> float:
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    argv = [sys.executable, "-m", "pwdeploy", "render", "-f", str(EXAMPLE)]
    start = time.perf_counter()
    subprocess.run(argv, env=env, capture_output=True, check=True, cwd=checkout)
    return time.perf_counter() - start


def render_modules(checkout: Path) -> set[str]:
    """Every module `python -X importtime -m pwdeploy render` imports, started from ``checkout``."""
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    argv = [sys.executable, "-X", "importtime", "-m", "pwdeploy", "render", "-f", str(EXAMPLE)]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, check=True, cwd=checkout)
    return {line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines() if line.startswith("import time:")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=2000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--baseline", type=Path, default=None)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="pwdeploy-bench-check-") as tmp:
        folder = Path(tmp)
        make_folder(folder, args.files)
        lines = sum(p.read_text().count("\n") for p in folder.rglob("*.py"))
        seconds, files, findings = time_check(folder, args.runs)
    best, median = min(seconds), statistics.median(seconds)
    print(f"check: {files} files, {lines} lines, {findings} findings")
    print(f"check: best {best:.2f} s, median {median:.2f} s over {args.runs} runs ({best / files * 1e3:.2f} ms a file)")
    if args.baseline is None:
        checks = sorted(m for m in render_modules(REPO) if m.startswith("pwdeploy.check"))
        print(f"render imports these modules of pwdeploy.check: {checks if checks else 'none'}")
        return
    ours: list[float] = []
    theirs: list[float] = []
    for _ in range(args.runs):
        ours.append(render_seconds(REPO))
        theirs.append(render_seconds(args.baseline))
    mine, base = statistics.median(ours), statistics.median(theirs)
    print(
        f"render start-to-end: this checkout {mine:.3f} s, {args.baseline} {base:.3f} s (median of {args.runs}): "
        f"ratio {mine / base:.2f}"
    )
    ours_modules, base_modules = render_modules(REPO), render_modules(args.baseline)
    extra = sorted(ours_modules - base_modules)
    print(
        f"render imports {len(ours_modules)} modules here, {len(base_modules)} in {args.baseline}; "
        f"more here: {extra if extra else 'none'}"
    )


if __name__ == "__main__":
    main()
