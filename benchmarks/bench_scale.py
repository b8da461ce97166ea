"""pwdeploy at scale on the real control plane (tests/control_plane: kube-apiserver 1.35, JobSet, the scheduler,
KWOK's simulated TPU nodes), beside kubectl doing the same: for each size, a job of N slices of v5p-32 (4 worker
pods a slice, and the head: 4N + 1 pods, each slice on a node pool of its own as on GKE), then

- ``render`` (CPU: what ``status`` is measured against) and ``submit --wait`` (kubectl: ``apply`` + ``wait``);
- waiting: ``submit --wait=done`` on the running job for ``--window`` seconds, against ``kubectl wait
  --for=condition=Completed`` for as long: the requests each makes in that minute;
- ``status`` (kubectl: ``get pods -l``), ``diagnose``;
- ``logs --all`` (kubectl: ``logs -l ... --all-containers --prefix --max-log-requests 16``): the first line, the
  whole read, for each ``--streams`` value of ``--max-streams``; ``logs --all -f``: its first line (stopped with
  Ctrl-C ``--follow-s`` seconds after it);
- ``drill --lose-slice 1`` (with ``--drill``): the recovery, end to end, as the drill reports it;
- ``delete --wait`` (kubectl: ``delete --cascade=foreground --wait`` of the same job submitted again).

Each command is a process run as the namespace-scoped user: wall and CPU seconds and peak memory of the process
(``os.wait4``), its first line on stdout, and its requests as the API server counted them (the control plane's
audit log, by User-Agent: a watch or a log stream is one request however long it lasts). With ``--users N``, N
users at once (each a job of 1 slice of v5p-8) submit --wait, status, logs --all -f for ``--follow-s`` seconds and
delete --wait: every command's exit status, and the requests a second against the API server while they run.

The machine is shared: each table says the load average it was measured under. ``--plane FOLDER`` uses a control
plane ``scripts/control-plane.sh start`` keeps running (its folder); without it one is started for the run.

``--steps`` measures only some of these (``wait,status,diagnose,logs,follow,delete``; render and submit always),
``--repeat N`` runs render and status N times each, one after the other (their CPU side by side).

Usage: python3 benchmarks/bench_scale.py [--slices 4,16,64,256] [--users 20] [--window 60] [--drill]
       [--streams 4,16,64] [--plane DIR] [--steps wait,status,...] [--repeat N]
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from pwdeploy import identifiers as ids  # noqa: E402
from tests.control_plane import NodePool, TpuPool, binaries  # noqa: E402
from tests.control_plane.cluster import ControlPlane, attach, start  # noqa: E402
from tests.control_plane.commands import HEAD_POOL  # noqa: E402
from tests.control_plane.scale import Run, job_flags, pools, run, serve_logs, stand_up, take_down  # noqa: E402

LINES = [f"step {i}: loss 0.{i:04d}" for i in range(5)]  # what every container's log holds
SELECTOR = "jobset.sigs.k8s.io/jobset-name"
STEPS = ("wait", "status", "diagnose", "logs", "follow", "delete")  # --drill adds the drill before delete
T = TypeVar("T")


def row(what: str, done: Run, extra: str = "") -> list[str]:
    first = f"{done.first_line:.1f} s" if done.first_line is not None else "-"
    verbs = ", ".join(f"{n} {verb}" for verb, n in sorted(done.requests.items()))
    status = "" if done.returncode == 0 else f" (exit {done.returncode})"
    return [what + status, f"{done.wall:.1f} s", f"{done.cpu:.2f} s", f"{done.max_rss_mib:.0f} MiB", first,
            f"{done.sent} ({verbs})", extra]  # fmt: skip


def table(title: str, rows: list[list[str]]) -> None:
    load = "/".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"\n{title} (load average {load} at the end)\n")
    head = ["command", "wall", "CPU", "peak RSS", "first line", "requests", ""]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for r in rows:
        print("| " + " | ".join(r) + " |")
    sys.stdout.flush()


def measure_size(plane: ControlPlane, slices: int, args: argparse.Namespace) -> None:
    ns = plane.user_namespace
    name = f"sc{slices}-{secrets.token_hex(2)}"
    flags = job_flags(name, ns, slices)
    made = stand_up(plane, pools(slices))
    rows: list[list[str]] = [[f"(nodes: {4 * slices + 1} made in {made:.0f} s)"] + [""] * 6]
    serve_logs(plane, ns, LINES)
    try:
        rows.append(row("pwdeploy render", run(plane, ["pwdeploy", "render", *flags])))
        rows.append(row("pwdeploy submit --wait", run(plane, ["pwdeploy", "submit", *flags, "--skip-preflight",
                                                                "--wait"], timeout=3600)))  # fmt: skip
        for step in (_waits, _reads, _logs):
            rows += step(plane, name, flags, args)
        if args.drill:
            drill = _drill(plane, name, ns)
            rows.append(row("pwdeploy drill --lose-slice 1", drill, _recovery(drill)))
        if "delete" in args.steps:
            rows += _deletes(plane, name, slices)
    finally:
        plane.clear_jobs(ns, timeout=1800)
        take_down(plane, pools(slices))
    table(f"{slices} slices of v5p-32 ({4 * slices + 1} pods)", rows)


def _waits(plane: ControlPlane, name: str, flags: list[str], args: argparse.Namespace) -> list[list[str]]:
    """A wait on the running job for ``--window`` seconds, pwdeploy's and kubectl's."""
    if "wait" not in args.steps:
        return []
    ns, window = plane.user_namespace, args.window
    waited = run(plane, ["pwdeploy", "submit", *flags, "--skip-preflight", "--wait=done", "--timeout",
                         str(window)], timeout=window + 120)  # fmt: skip
    kwaited = run(plane, ["kubectl", "wait", "-n", ns, "--for=condition=Completed", f"jobset/{name}",
                          f"--timeout={window}s"], agent="kubectl/", timeout=window + 120)  # fmt: skip
    return [row(f"pwdeploy submit --wait=done, {window} s on the running job", waited),
            row(f"kubectl wait --for=condition=Completed, {window} s", kwaited)]  # fmt: skip


def _reads(plane: ControlPlane, name: str, flags: list[str], args: argparse.Namespace) -> list[list[str]]:
    """status of the running job (``--repeat`` times, each after a render and before a status of a job that is not
    there, what any cluster command costs: their CPU side by side) beside kubectl's get pods, and diagnose."""
    ns, rows = plane.user_namespace, []
    if "status" in args.steps:
        _until_running(plane, name, ns)  # the JobSet controller counts its Jobs ready some time after the pods
        for _ in range(args.repeat):  # the floor: status of a job that is not there (one get, exit 4)
            rows.append(row("pwdeploy render", run(plane, ["pwdeploy", "render", *flags])))
            rows.append(row("pwdeploy status", run(plane, ["pwdeploy", "status", name, "-n", ns])))
            rows.append(row("pwdeploy status (no such job)", run(plane, ["pwdeploy", "status", "none", "-n", ns])))
        rows.append(row("kubectl get pods -l", run(plane, ["kubectl", "get", "pods", "-n", ns, "-l",
                                                           f"{SELECTOR}={name}"], agent="kubectl/")))  # fmt: skip
    if "diagnose" in args.steps:
        rows.append(row("pwdeploy diagnose", run(plane, ["pwdeploy", "diagnose", name, "-n", ns])))
    return rows


def _logs(plane: ControlPlane, name: str, flags: list[str], args: argparse.Namespace) -> list[list[str]]:
    """logs --all for each ``--streams``, kubectl's logs -l, and logs --all -f's first line."""
    ns, rows = plane.user_namespace, []
    if "logs" in args.steps:
        for streams in args.streams:
            logs = run(plane, ["pwdeploy", "logs", name, "-n", ns, "--all", "--max-streams", str(streams)],
                       timeout=3600)  # fmt: skip
            rows.append(row(f"pwdeploy logs --all --max-streams {streams}", logs,
                            f"{logs.stdout.count(LINES[-1])} containers read"))  # fmt: skip
        klogs = run(plane, ["kubectl", "logs", "-n", ns, "-l", f"{SELECTOR}={name}", "--all-containers", "--prefix",
                            "--max-log-requests", "16"], agent="kubectl/", timeout=3600)  # fmt: skip
        rows.append(row("kubectl logs -l --all-containers --prefix --max-log-requests 16", klogs,
                        f"{klogs.stdout.count(LINES[-1])} containers read"))  # fmt: skip
    if "follow" in args.steps:
        follow = run(plane, ["pwdeploy", "logs", name, "-n", ns, "--all", "-f"], interrupt_after=args.follow_s,
                     timeout=3600)  # fmt: skip
        rows.append(row(f"pwdeploy logs --all -f (stopped {args.follow_s:g} s after its first line)", follow))
    return rows


def _deletes(plane: ControlPlane, name: str, slices: int) -> list[list[str]]:
    """delete --wait of the job, and kubectl's delete --wait of the same job submitted again."""
    ns, again = plane.user_namespace, f"sk{slices}-{secrets.token_hex(2)}"
    deleted = run(plane, ["pwdeploy", "delete", name, "-n", ns, "--yes", "--wait"], timeout=3600)
    resubmitted = run(plane, ["pwdeploy", "submit", *job_flags(again, ns, slices), "--skip-preflight", "--wait"],
                      timeout=3600)  # fmt: skip
    assert resubmitted.returncode == 0, resubmitted.stderr
    kdeleted = run(plane, ["kubectl", "delete", "-n", ns, "jobset", again, "--cascade=foreground", "--wait"],
                   agent="kubectl/", timeout=3600)  # fmt: skip
    return [row("pwdeploy delete --wait", deleted), row("kubectl delete --cascade=foreground --wait", kdeleted)]


def _until_running(plane: ControlPlane, name: str, ns: str, timeout: float = 1200) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = plane.api.get(f"/apis/jobset.x-k8s.io/v1alpha2/namespaces/{ns}/jobsets/{name}")
        ready = {
            s.get("name"): s.get("ready", 0) for s in (found.get("status") or {}).get("replicatedJobsStatus") or []
        }
        wanted = {rj["name"]: rj.get("replicas", 1) for rj in found["spec"]["replicatedJobs"]}
        if all(ready.get(k, 0) >= v for k, v in wanted.items()):
            return
        time.sleep(2.0)


def _drill(plane: ControlPlane, name: str, ns: str) -> Run:
    """``drill --lose-slice 1`` with the program's part played, as tests/test_control_plane_drill.py plays it (KWOK
    runs no program): main has reported steps 1 to 5; once the slice's pods are replaced, main exits with the retry
    code (as pwdeploy.runtime.retry_on_slice_loss makes it), and main of the restarted job reports steps 4 to 6 once
    every pod of the restarted job runs (Pathways' main steps once its slices are back)."""
    _until_running(plane, name, ns)  # the JobSet controller counts 256 Jobs ready some time after the pods
    head = _until(lambda: _head(plane, name, ns, 0))
    plane.write_pod_log(ns, head, [f"step {n}" for n in range(1, 6)], container=ids.MAIN_CONTAINER)
    before = _slice_pods(plane, name, ns, 1)
    pods = _running(plane, name, ns, 0)
    argv = ["pwdeploy", "drill", name, "-n", ns, "--lose-slice", "1", "--yes", "-o", "json", "--timeout", "1800"]
    with ThreadPoolExecutor(1) as pool:
        drilled = pool.submit(run, plane, argv, timeout=3600)
        _until(lambda: _slice_pods(plane, name, ns, 1) - before)  # the Job controller replaced the evicted pods
        plane.exit_pod(ns, head, ids.RETRY_EXIT_CODE, container=ids.MAIN_CONTAINER)
        new_head = _until(lambda: _head(plane, name, ns, 1))
        _until(lambda: _running(plane, name, ns, 1) >= pods)  # every pod of the restarted job
        plane.write_pod_log(ns, new_head, ["step 4", "step 5", "step 6"], container=ids.MAIN_CONTAINER)
        return drilled.result()


def _head(plane: ControlPlane, name: str, ns: str, attempt: int) -> str:
    """The running head pod of restart attempt ``attempt`` ("" while there is none)."""
    for pod in plane.pods(ns, f"{SELECTOR}%3D{name},{ids.REPLICATED_JOB_LABEL}%3D{ids.HEAD_JOB}"):
        meta = pod["metadata"]
        attempt_of = (meta.get("labels") or {}).get(ids.RESTART_ATTEMPT_LABEL)
        if pod["status"].get("phase") == "Running" and not meta.get("deletionTimestamp") and attempt_of == str(attempt):
            return str(meta["name"])
    return ""


def _running(plane: ControlPlane, name: str, ns: str, attempt: int) -> int:
    """The job's running pods of restart attempt ``attempt``."""
    return sum(
        p["status"].get("phase") == "Running"
        and not p["metadata"].get("deletionTimestamp")
        and (p["metadata"].get("labels") or {}).get(ids.RESTART_ATTEMPT_LABEL) == str(attempt)
        for p in plane.pods(ns, f"{SELECTOR}%3D{name}")
    )


def _slice_pods(plane: ControlPlane, name: str, ns: str, index: int) -> set[str]:
    selector = f"{SELECTOR}%3D{name},{ids.REPLICATED_JOB_LABEL}%3D{ids.WORKER_JOB},{ids.JOB_INDEX_LABEL}%3D{index}"
    return {str(p["metadata"]["uid"]) for p in plane.pods(ns, selector)}


def _until(found: Callable[[], T], timeout: float = 1200) -> T:
    deadline = time.monotonic() + timeout
    while not (answer := found()):
        if time.monotonic() > deadline:
            raise TimeoutError(f"not so after {timeout:.0f} s")
        time.sleep(1.0)
    return answer


def _recovery(drill: Run) -> str:
    try:
        found = json.loads(drill.stdout)
    except ValueError:
        return drill.stderr[-200:]
    keys = ("rule_fired", "stopped", "seconds_to_detection", "seconds_to_all_running", "seconds_to_first_step")
    return ", ".join(f"{k} {found.get(k)}" for k in keys if k in found)


def measure_users(plane: ControlPlane, users: int, follow_s: float) -> None:
    """``users`` at once, each with a job of its own: submit --wait, status, logs --all -f, delete --wait."""
    ns = plane.user_namespace
    tpu = [NodePool(f"tpu-u{i}", nodes=1, tpu=TpuPool("tpu-v5p-slice", "2x2x1", 4)) for i in range(users)]
    cpu = NodePool(HEAD_POOL.name, nodes=users, cpu=HEAD_POOL.cpu, memory=HEAD_POOL.memory)
    stand_up(plane, [cpu, *tpu])
    serve_logs(plane, ns, LINES)
    start_mark = len(plane.audit_lines())
    began = time.monotonic()
    try:
        with ThreadPoolExecutor(users) as workers:
            results = list(workers.map(lambda i: _one_user(plane, ns, i, follow_s), range(users)))
    finally:
        elapsed = time.monotonic() - began
        plane.clear_jobs(ns, timeout=600)
        take_down(plane, [cpu, *tpu])
    per_second = _per_second(plane.audit_lines()[start_mark:])
    rows = []
    for step in ("submit --wait", "status", "logs --all -f", "delete --wait"):
        done = [r[step] for r in results]
        failed = sum(d.returncode not in (0, 130) for d in done)
        walls = sorted(d.wall for d in done)
        # no requests a command: the audit log cannot tell one user's from another's (one user, one User-Agent)
        rows.append([f"{users} x pwdeploy {step}", f"{walls[0]:.1f}-{walls[-1]:.1f} s", "", "", "", "",
                     f"{failed} failed"])  # fmt: skip
    total = sum(per_second.values())
    rows.append(
        [
            f"all of it, {elapsed:.0f} s",
            "",
            "",
            "",
            "",
            f"{total} in all",
            f"{total / elapsed:.1f}/s on average, at most {max(per_second.values(), default=0)} in one second",
        ]
    )
    table(f"{users} users at once, each a job of 1 slice of v5p-8", rows)


def _one_user(plane: ControlPlane, ns: str, index: int, follow_s: float) -> dict[str, Run]:
    name = f"u{index}-{secrets.token_hex(2)}"
    flags = ["--name", name, "--namespace", ns, "--tpu-type", "v5p-8", "--num-slices", "1", "--image",
             "python:3.11.9-slim", "--command", "python3 train.py", "--gcs-scratch", "gs://pwdeploy-e2e/scratch",
             "--head-node-pool", HEAD_POOL.name]  # fmt: skip
    done = {"submit --wait": run(plane, ["pwdeploy", "submit", *flags, "--skip-preflight", "--wait"], settle=0)}
    done["status"] = run(plane, ["pwdeploy", "status", name, "-n", ns], settle=0)
    done["logs --all -f"] = run(plane, ["pwdeploy", "logs", name, "-n", ns, "--all", "-f"], settle=0,
                                interrupt_after=follow_s)  # fmt: skip
    done["delete --wait"] = run(plane, ["pwdeploy", "delete", name, "-n", ns, "--yes", "--wait"], settle=0)
    return done


def _per_second(lines: list[str]) -> Counter[int]:
    """pwdeploy's requests (audit IDs) by the second they were received in."""
    seconds: dict[str, int] = {}
    for line in lines:
        event: dict[str, Any] = json.loads(line)
        if str(event.get("userAgent", "")).startswith("pwdeploy/"):
            at = datetime.fromisoformat(str(event["requestReceivedTimestamp"]).replace("Z", "+00:00"))
            seconds[str(event["auditID"])] = int(at.timestamp())
    return Counter(seconds.values())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--slices", default="4,16,64,256", help="sizes, comma-separated")
    parser.add_argument("--users", type=int, default=0, help="users at once (0: not measured)")
    parser.add_argument("--window", type=int, default=60, help="seconds a wait on the running job is measured")
    parser.add_argument("--follow-s", type=float, default=10.0, help="seconds logs --all -f runs after its first line")
    parser.add_argument("--drill", action="store_true", help="drill --lose-slice 1 on each size")
    parser.add_argument("--streams", default="16", help="logs --all --max-streams values, comma-separated")
    parser.add_argument("--plane", type=Path, help="a running control plane's folder (scripts/control-plane.sh)")
    parser.add_argument("--steps", default=",".join(STEPS), help="what to measure after submit, comma-separated")
    parser.add_argument("--repeat", type=int, default=1, help="render and status this many times, one after another")
    args = parser.parse_args()
    args.streams = [int(v) for v in args.streams.split(",") if v]
    args.steps = {v for v in args.steps.split(",") if v}
    if args.steps - set(STEPS):
        parser.error(f"--steps: {', '.join(sorted(args.steps - set(STEPS)))} is not one of {', '.join(STEPS)}")
    # A user's install keeps compiled modules: a run that may not write them compiles every module of every
    # command anew (about 0.2 s of CPU each), which would be measured as the command's own.
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(REPO / "pwdeploy")], check=True)
    bins = binaries.built()
    if bins is None:
        sys.exit("the control plane is not built: bash scripts/control-plane.sh build")
    plane = attach(args.plane, bins) if args.plane else start(bins)
    try:
        for slices in [int(s) for s in args.slices.split(",") if s]:
            measure_size(plane, slices, args)
        if args.users:
            measure_users(plane, args.users, args.follow_s)
    finally:
        if not args.plane:
            plane.stop()


if __name__ == "__main__":
    main()
