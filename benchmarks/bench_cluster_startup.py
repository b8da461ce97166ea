"""A cluster command's start-up and its cost per pod, measured side by side in one run against StubKubeApiServer
(a loopback HTTPS stub, not an API server; tests/kube_stub.py).

1. Whole processes, interleaved, median wall and CPU: `python -c "import click, yaml"` (the floor), `pwdeploy
   render`, `pwdeploy list` against the stub, and the same `list` with the official client's package imported
   first (`import kubernetes.client`: what the seam cost before it spoke REST through urllib3 alone). Target:
   `list` <= 2x `render`.
2. `pwdeploy status` on a 1-slice job (2 pods) and on a 256-slice v5p-32 job (1,025 pods, read in pages of 500):
   wall, CPU and peak RSS of the process, and the CPU per extra pod. Target: flat per pod, memory bounded.

Usage: python3 benchmarks/bench_cluster_startup.py [--runs N]
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
from typing import Any

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "examples" / "data_parallel" / "job.yaml"


# Runs a module (-m) or code (-c) as python would, and reports the process's peak RSS (VmHWM: this process's own;
# ru_maxrss would carry the forking benchmark's size across exec) on stderr when it ends.
WRAP = """import atexit, runpy, sys
def peak():
    for line in open('/proc/self/status'):
        if line.startswith('VmHWM'):
            sys.stderr.write('PEAK ' + line.split()[1] + chr(10))
atexit.register(peak)
kind, target, *rest = sys.argv[1:]
sys.argv = [target, *rest]
if kind == '-m':
    runpy.run_module(target, run_name='__main__', alter_sys=True)
else:
    exec(compile(target, '<string>', 'exec'), {'__name__': '__main__'})
"""


def measure(argv: list[str]) -> tuple[float, float, int]:
    """(wall s, CPU s, peak RSS KiB) of one child process running ``argv`` (``-m MODULE ...`` or ``-c CODE ...``
    for this interpreter); its exit status must be 0."""
    start = time.perf_counter()
    child = subprocess.Popen([sys.executable, "-c", WRAP, *argv], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(child.pid, 0)
    wall = time.perf_counter() - start
    err = child.stderr.read().decode() if child.stderr else ""
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{' '.join(argv[:4])} ... exited {os.waitstatus_to_exitcode(status)}: {err[-500:]}")
    peak = next((int(line.split()[1]) for line in err.splitlines() if line.startswith("PEAK ")), 0)
    return wall, usage.ru_utime + usage.ru_stime, peak


def pod(job: str, rj: str, index: int, host: int) -> dict[str, Any]:
    from pwdeploy import identifiers as ids

    labels = {
        ids.JOBSET_NAME_LABEL: job,
        ids.REPLICATED_JOB_LABEL: rj,
        ids.JOB_INDEX_LABEL: str(index),
        ids.COMPLETION_INDEX_LABEL: str(host),
    }
    container = ids.MAIN_CONTAINER if rj == ids.HEAD_JOB else ids.WORKER_CONTAINER
    running = {"running": {"startedAt": "2026-01-01T00:01:00Z"}}
    return {
        "metadata": {"name": f"{job}-{rj}-{index}-{host}-x7k2p", "namespace": "default", "labels": labels},
        "spec": {"nodeName": f"node-{index}-{host}", "containers": [{"name": container}]},
        "status": {
            "phase": "Running",
            "conditions": [{"type": "Ready", "status": "True"}],
            "containerStatuses": [{"name": container, "ready": True, "restartCount": 0, "state": running}],
        },
    }


def serve(stub: Any) -> None:
    from pwdeploy import identifiers as ids
    from tests.kube_objects import rendered_jobset

    for name, slices, tpu in (("small", 1, "v5p-8"), ("big", 256, "v5p-32")):
        stub.put("jobsets", rendered_jobset(name, slices=slices, tpu_type=tpu))
        hosts = 4 if tpu == "v5p-32" else 1
        stub.put("pods", pod(name, ids.HEAD_JOB, 0, 0))
        for index in range(slices):
            for host in range(hosts):
                stub.put("pods", pod(name, ids.WORKER_JOB, index, host))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=11)
    runs = parser.parse_args().runs
    sys.path.insert(0, str(REPO))
    import compileall

    import pwdeploy
    from tests.kube_stub import StubKubeApiServer

    compileall.compile_dir(Path(pwdeploy.__file__).parent, quiet=1)  # as a regular install does (bench_render.py)
    with StubKubeApiServer(tokens={"stub-token": "alice"}) as stub, tempfile.TemporaryDirectory() as tmp:
        serve(stub)
        kc = str(stub.write_kubeconfig(Path(tmp) / "kc", {"stub": ("stub-token", None)}, current="stub"))
        pw = ["-m", "pwdeploy"]
        with_client = "import sys, runpy, kubernetes.client; sys.argv = ['pwdeploy', *sys.argv[1:]]; "
        with_client += "runpy.run_module('pwdeploy', run_name='__main__')"
        variants = {
            "import click, yaml": ["-c", "import click, yaml"],
            "pwdeploy render": [*pw, "render", "-f", str(EXAMPLE)],
            "pwdeploy list": [*pw, "list", "--kubeconfig", kc],
            "list + import kubernetes.client": ["-c", with_client, "list", "--kubeconfig", kc],
            "status, 1 slice (2 pods)": [*pw, "status", "small", "--kubeconfig", kc],
            "status, 256 slices (1,025 pods)": [*pw, "status", "big", "--kubeconfig", kc],
        }
        samples: dict[str, list[tuple[float, float, int]]] = {name: [] for name in variants}
        for argv in variants.values():  # warm the file cache once
            measure(argv)
        for _ in range(runs):
            for name, argv in variants.items():
                samples[name].append(measure(argv))
    median = {n: tuple(statistics.median(s[i] for s in v) for i in range(3)) for n, v in samples.items()}
    floor, render = median["import click, yaml"], median["pwdeploy render"]
    print(f"whole processes, median of {runs} interleaved runs (wall, CPU, peak RSS):")
    for name, (wall, cpu, rss) in median.items():
        print(
            f"  {name:34s} {wall * 1000:7.1f} ms {wall / floor[0]:5.2f}x floor  {cpu * 1000:7.1f} ms CPU "
            f"{cpu / render[1]:5.2f}x render  {rss / 1024:6.1f} MiB"
        )
    listed = median["pwdeploy list"]
    for what, i in (("wall", 0), ("CPU", 1)):
        ratio = listed[i] / render[i]
        print(f"list / render ({what}) = {ratio:.2f}x (target <= 2x): {'ok' if ratio <= 2 else 'MISSED'}")
    before = median["list + import kubernetes.client"]
    print(f"list with the official client imported / without (CPU) = {before[1] / listed[1]:.2f}x")
    small, big = median["status, 1 slice (2 pods)"], median["status, 256 slices (1,025 pods)"]
    per_pod_cpu = (big[1] - small[1]) / 1023
    per_pod_rss = (big[2] - small[2]) / 1023
    print(f"status: {per_pod_cpu * 1e3:.3f} ms CPU and {per_pod_rss:.1f} KiB peak RSS per extra pod (1,023 more pods)")


if __name__ == "__main__":
    main()
