"""`pwdeploy check` against its parse floor and its peers on real code, its peak memory against the number of files,
and what `pwdeploy check` costs `render`.

1. Speed, on a corpus of the packages installed beside pwdeploy (jax, orbax, flax, optax, grain, pathwaysutils:
   those present): the CPU seconds (user + system, the children's rusage) of `pwdeploy check DIRS -o json`, of the
   parse floor (a Python that reads the same files and parses them with ``ast.parse``), of `ruff check --select
   ALL --no-cache` and of `pyflakes DIRS`, each started --runs times, taking turns: the medians, files per
   CPU-second, and each tool's CPU over the parse floor (target for check: <= 2x).
2. Peak memory (the process's own peak resident set, ``VmHWM``) over generated folders of --counts modules (~240
   lines each) and over the corpus; pyflakes' over the corpus: check keeps one file's tree at a time.
3. With --baseline DIR (a checkout without `pwdeploy check`): `pwdeploy render -f examples/data_parallel/job.yaml`
   here and there, alternately, and the modules `python -X importtime` shows render importing here and not there.
   Without it: the check's modules among those render imports (none: render runs no check).

Usage: python3 benchmarks/bench_check.py [--runs 3] [--counts 250,1000,4000] [--baseline DIR]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "examples" / "data_parallel" / "job.yaml"
CORPUS = ("jax", "orbax", "flax", "optax", "grain", "pathwaysutils")
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


def corpus() -> list[Path]:
    """The folders of the corpus packages installed here."""
    found: list[Path] = []
    for name in CORPUS:
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.submodule_search_locations:
            found.extend(Path(p) for p in spec.submodule_search_locations)
    return found


FLOOR = """
import ast, gc, sys
from pathlib import Path
gc.disable()
for root in sys.argv[1:]:
    for path in sorted(Path(root).rglob("*.py")):
        ast.parse(path.read_bytes())
"""
PEAK = """
import json, sys
from pathlib import Path
if sys.argv[1] == "check":
    from pwdeploy.check import check
    report = check(None, [Path(p) for p in sys.argv[2:]])
    files = len(report.files)
else:
    from pyflakes.api import checkRecursive
    from pyflakes.reporter import Reporter
    import io
    files = 0
    checkRecursive(sys.argv[2:], Reporter(io.StringIO(), io.StringIO()))
# VmHWM: this process's own peak resident set (ru_maxrss keeps the parent's from before exec)
hwm = next(line for line in open("/proc/self/status") if line.startswith("VmHWM:"))
print(json.dumps({"files": files, "peak": int(hwm.split()[1]) * 1024}))
"""


def cpu_seconds(argv: list[str]) -> float:
    """The CPU seconds (user + system) one run of ``argv`` took, its children included."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(argv, capture_output=True, check=False, cwd=REPO)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def tools(folders: list[str]) -> dict[str, list[str]]:
    found = {
        "parse floor": [sys.executable, "-c", FLOOR, *folders],
        "pwdeploy check": [sys.executable, "-m", "pwdeploy", "check", *folders, "-o", "json"],
    }
    ruff = shutil.which("ruff", path=str(Path(sys.executable).parent)) or shutil.which("ruff")
    if ruff:
        found["ruff --select ALL"] = [ruff, "check", "--select", "ALL", "--no-cache", "--exit-zero", "-q", *folders]
    if importlib.util.find_spec("pyflakes") is not None:
        found["pyflakes"] = [sys.executable, "-m", "pyflakes", *folders]
    return found


def speed(folders: list[Path], runs: int) -> None:
    files = sum(1 for f in folders for _ in f.rglob("*.py"))
    size = sum(p.stat().st_size for f in folders for p in f.rglob("*.py")) / 2**20
    names = ", ".join(f"{f.name} ({sum(1 for _ in f.rglob('*.py'))})" for f in folders)
    print(f"corpus: {files} files, {size:.1f} MiB: {names}")
    commands = tools([str(f) for f in folders])
    seconds: dict[str, list[float]] = {name: [] for name in commands}
    for _ in range(runs):
        for name, argv in commands.items():  # taking turns: the machine's load falls on every tool alike
            seconds[name].append(cpu_seconds(argv))
    floor = statistics.median(seconds["parse floor"])
    for name, taken in seconds.items():
        median = statistics.median(taken)
        print(
            f"  {name:20} {median:7.2f} CPU-s (median of {runs})  {files / median:7.0f} files per CPU-second  "
            f"{median / floor:5.2f}x the parse floor"
        )


def peak(argv: list[str]) -> tuple[int, int]:
    done = subprocess.run(argv, capture_output=True, text=True, check=True, cwd=REPO)
    answer = json.loads(done.stdout.strip().splitlines()[-1])
    return answer["files"], answer["peak"]


def memory(folders: list[Path], counts: list[int]) -> None:
    print("peak memory (VmHWM: the process's peak resident set):")
    with tempfile.TemporaryDirectory(prefix="pwdeploy-bench-check-") as tmp:
        for count in counts:
            folder = Path(tmp) / str(count)
            folder.mkdir()
            make_folder(folder, count)
            files, used = peak([sys.executable, "-c", PEAK, "check", str(folder)])
            print(f"  pwdeploy check, generated: {files:6} files  {used / 2**20:7.1f} MiB")
    files, used = peak([sys.executable, "-c", PEAK, "check", *map(str, folders)])
    print(f"  pwdeploy check, corpus:    {files:6} files  {used / 2**20:7.1f} MiB")
    if importlib.util.find_spec("pyflakes") is not None:
        _, used = peak([sys.executable, "-c", PEAK, "pyflakes", *map(str, folders)])
        print(f"  pyflakes, corpus:          {files:6} files  {used / 2**20:7.1f} MiB")


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
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--counts", default="250,1000,4000", help="generated folders' sizes, comma-separated")
    parser.add_argument("--baseline", type=Path, default=None)
    args = parser.parse_args()
    folders = corpus()
    if not folders:
        raise SystemExit(f"none of {', '.join(CORPUS)} is installed here: nothing to measure on")
    speed(folders, args.runs)
    memory(folders, [int(n) for n in args.counts.split(",")])
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
