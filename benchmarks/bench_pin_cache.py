"""Render and the image up-to-date check over a big job folder, with the per-folder digest cache.

A job folder of --files files (--mb MB in all, random bytes, in a temporary directory under --dir) whose job
image is pinned from pwdeploy-image.lock (image.repository set, main.image not), against the same job with
main.image set (nothing to pin, the folder is never read). Whole processes, as a user runs them:

1. `pwdeploy render`: the first run (no digest cache or record of a walk yet; the files are in the page cache,
   since recording the lock read them), then --runs interleaved runs of both jobs (wall medians, the median of
   the pairs' ratios, CPU medians; target: pinned <= 1.3x unpinned), then a
   run after touching one file (its mtime changes: it is hashed again, the rest comes from the cache; the median
   of three such runs).
2. In this process, what render does to the folder: the walk alone (one listing per folder, one stat per file)
   against `source_folder.scan` (the walk, the digest cache and its record) and the flags render reads from it
   (interleaved, median of 3 x --runs): what the cache adds to the walk of an unchanged folder. In CPU time
   (user + system: the stats are system time), so that other programs on a shared machine count less.
3. `pwdeploy image build --push` when the lock already holds these inputs (no engine call: the check is the
   hashing and the lock): the big folder against a copy of examples/data_parallel (median of --runs).

Usage: python3 benchmarks/bench_pin_cache.py [--files 5000] [--mb 500] [--runs 7] [--dir /tmp]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "data_parallel"
REPOSITORY = "registry.example/bench/job"
STATE = Path(".pwdeploy")  # the digest cache, the record of the last walk
JOB = """name: bench
pathways_version: 0.10.2
tpu: {type: v5p-8}
main: {command: python3 train.py%s}
storage: {scratch: gs://bucket/scratch}
images:
  server: us-docker.pkg.dev/cloud-tpu-v2-images/pathways/server:20260730-jax_0.10.2
  proxy_server: us-docker.pkg.dev/cloud-tpu-v2-images/pathways/proxy_server:20260730-jax_0.10.2
"""


def make_folder(root: Path, files: int, megabytes: int) -> Path:
    """The pinned job's folder: job.yaml, train.py (imports pwdeploy, so the image holds a wheel) and data/."""
    folder = root / "pinned"
    size = megabytes * 1_000_000 // files
    for index in range(files):
        path = folder / "data" / f"part{index // 500:02d}" / f"file{index:05d}.bin"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(os.urandom(size))
    (folder / "train.py").write_text("from pwdeploy import runtime\n\nprint(runtime)\n")
    (folder / "job.yaml").write_text(JOB % "" + f"image: {{repository: {REPOSITORY}}}\n")
    plain = root / "plain"
    plain.mkdir()
    (plain / "job.yaml").write_text(JOB % f", image: {REPOSITORY}:1")
    return folder


def record_push(config: Path, overrides: dict[str, object]) -> None:
    """Write the lock entry `image build --push` would write (the digest is made up: nothing is pulled)."""
    from pwdeploy.config import load_job
    from pwdeploy.images import job_image as spec
    from pwdeploy.images import lock

    job = load_job(config, overrides)
    found = spec.collect(job, config)
    lock.record(spec.lock_path(job), job.name, found.lock_entry(REPOSITORY, "sha256:" + "0" * 64))


def timed(argv: list[str], cpu: list[float] | None = None) -> float:
    """The wall seconds of one run of ``argv``; its CPU seconds (user + system, the kernel's accounting of the
    child) are appended to ``cpu`` when given."""
    start = time.perf_counter()
    child = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    stderr = child.stderr.read() if child.stderr else ""
    _, status, usage = os.wait4(child.pid, 0)
    elapsed = time.perf_counter() - start
    child.returncode = os.waitstatus_to_exitcode(status)
    if child.returncode != 0:
        sys.exit(f"{' '.join(argv)} failed ({child.returncode}):\n{stderr}")
    if cpu is not None:
        cpu.append(usage.ru_utime + usage.ru_stime)
    return elapsed


def pwdeploy(*args: str) -> list[str]:
    return [sys.executable, "-m", "pwdeploy", *args]


def render_figures(folder: Path, plain: Path, runs: int) -> None:
    pinned_render = pwdeploy("render", "-f", str(folder / "job.yaml"))
    plain_render = pwdeploy("render", "-f", str(plain / "job.yaml"))
    shutil.rmtree(folder / STATE, ignore_errors=True)  # recording the lock made the digest cache
    first = timed(pinned_render)
    timed(plain_render)  # warm its imports once
    samples: dict[str, list[float]] = {"pinned": [], "plain": []}
    cpu: dict[str, list[float]] = {"pinned": [], "plain": []}
    for _ in range(runs):
        samples["pinned"].append(timed(pinned_render, cpu["pinned"]))
        samples["plain"].append(timed(plain_render, cpu["plain"]))
    pinned, unpinned = (statistics.median(samples[name]) for name in ("pinned", "plain"))
    pinned_cpu, plain_cpu = (statistics.median(cpu[name]) for name in ("pinned", "plain"))
    paired = statistics.median(a / b for a, b in zip(samples["pinned"], samples["plain"], strict=True))
    fastest = min(samples["pinned"]) / min(samples["plain"])
    touches = []
    for touched in sorted((folder / "data").rglob("*.bin"))[:3]:  # one file at a time, a run after each
        os.utime(touched)
        time.sleep(0.05)  # past the file system's timestamp tick, so the touched file is not "racy" for the run
        touches.append(timed(pinned_render))
    after_touch = statistics.median(touches)
    print(f"render, whole process (median of {runs} interleaved runs from the second run on):")
    print(f"  main.image set (no pinning)      {unpinned * 1000:8.1f} ms")
    print(f"  pinned from the lock             {pinned * 1000:8.1f} ms   {pinned / unpinned:5.2f}x (target <= 1.3x)")
    fast_pinned, fast_plain = min(samples["pinned"]) * 1000, min(samples["plain"]) * 1000
    print(f"  (fastest run of each: {fast_pinned:.1f} ms against {fast_plain:.1f} ms, {fastest:.2f}x)")
    print(f"  (median of the {runs} pairs' ratios: {paired:.2f}x)")
    print(
        f"  CPU (user + system), medians     {pinned_cpu * 1000:8.1f} ms against {plain_cpu * 1000:.1f} ms   "
        f"{pinned_cpu / plain_cpu:5.2f}x"
    )
    print(f"  pinned, first run (no cache)     {first * 1000:8.1f} ms   {first / unpinned:5.2f}x")
    print(f"  pinned, one file touched (of 3)  {after_touch * 1000:8.1f} ms   {after_touch / unpinned:5.2f}x")


def cache_figures(folder: Path, runs: int) -> None:
    from pwdeploy.images import source_folder
    from pwdeploy.images.ignore import IgnoreRules

    field = "image.source_dir"

    def walk() -> None:
        source_folder._walk(folder, IgnoreRules.read(folder), set())

    def files() -> None:  # what render's pin does with the folder, less the hash
        found = source_folder.scan(folder, field, "code")
        found.imports_pwdeploy(), found.credential_warnings(field)

    samples: dict[str, list[float]] = {"walk": [], "files": []}
    files()  # the cache is current: the renders above wrote it
    for _ in range(3 * runs):
        for name, step in (("walk", walk), ("files", files)):
            start = time.process_time()
            step()
            samples[name].append(time.process_time() - start)
    bare, cached = (statistics.median(samples[name]) * 1000 for name in ("walk", "files"))
    print(f"the folder in this process, CPU time (median of {3 * runs} interleaved runs):")
    print(f"  the walk alone                   {bare:8.1f} ms")
    print(f"  with the digest cache and the credential check {cached:.1f} ms: the cache adds {cached - bare:.1f} ms")


def build_figures(folder: Path, root: Path, runs: int) -> None:
    example = root / "example"
    shutil.copytree(EXAMPLE, example)
    repository = ("--image-repository", REPOSITORY)
    record_push(example / "job.yaml", {"image.repository": REPOSITORY})
    big = pwdeploy("image", "build", "--push", "-f", str(folder / "job.yaml"))
    small = pwdeploy("image", "build", "--push", "-f", str(example / "job.yaml"), *repository)
    timed(big), timed(small)
    samples: dict[str, list[float]] = {"big": [], "small": []}
    for _ in range(runs):
        samples["big"].append(timed(big))
        samples["small"].append(timed(small))
    big_s, small_s = (statistics.median(samples[name]) for name in ("big", "small"))
    print(f"image build --push, inputs unchanged (median of {runs}):")
    print(f"  examples/data_parallel           {small_s * 1000:8.1f} ms")
    print(f"  the big folder                   {big_s * 1000:8.1f} ms   {big_s / small_s:5.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--files", type=int, default=5000)
    parser.add_argument("--mb", type=int, default=500)
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="pwdeploy-bench-", dir=args.dir) as scratch:
        root = Path(scratch)
        start = time.perf_counter()
        folder = make_folder(root, args.files, args.mb)
        record_push(folder / "job.yaml", {})
        print(
            f"{args.files} files, {args.mb} MB in {folder} (made and recorded in {time.perf_counter() - start:.1f} s)"
        )
        render_figures(folder, root / "plain", args.runs)
        cache_figures(folder, args.runs)
        build_figures(folder, root, args.runs)


if __name__ == "__main__":
    main()
