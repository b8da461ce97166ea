"""How the rendered head pod stops its handler-less Python ``main``, in real PID namespaces as a container runtime
makes them (tests/pid_namespace.py): the kubelet's stop is SIGTERM to the container's first process from outside
its namespace, then SIGKILL once the grace period is over (kubernetes pkg/kubelet/kuberuntime/kuberuntime_container.go
``killContainer``; runc ``kill`` signals the container's initial process).

With ``shareProcessNamespace: true`` (what pwdeploy renders) main joins the pod's namespace, whose PID 1 is the pause
container: SIGTERM ends it (143). Without it (head.share_process_namespace off, or a JobSet rendered before) main is
PID 1 of its own namespace and the kernel drops the SIGTERM (pid_namespaces(7)): it keeps running until the SIGKILL
(137), which the head's FailJob rule fails the JobSet on. Beside them, the other ways a container stops that
pwdeploy's grounds encode: no preStop hook is rendered, and a memory limit ends in SIGKILL (137) counted as an OOM
kill."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from pwdeploy import identifiers as ids
from pwdeploy import manifests
from pwdeploy.config import load_job
from tests.conftest import REPO
from tests.pid_namespace import PAUSE, Launched, why_not

EXAMPLE = REPO / "examples" / "data_parallel" / "job.yaml"
WHY_NOT = why_not()
needs_namespaces = pytest.mark.skipif(WHY_NOT is not None, reason=f"no PID namespaces here: {WHY_NOT}")

# A Python program with no SIGTERM handler (CPython installs none), answering each line on stdin with "alive": a line
# answered after the SIGTERM was sent proves the signal was dropped (a fatal signal delivered to a process ends it
# before it runs another instruction of its own).
HANDLERLESS = "import sys\nprint('ready', flush=True)\nfor _ in sys.stdin:\n    print('alive', flush=True)\n"


def head_pod(**overrides: Any) -> dict[str, Any]:
    job = load_job(EXAMPLE, overrides, installed_jax=lambda: "0.10.2")
    jobset = manifests.build(job)[0]
    head = next(rj for rj in jobset["spec"]["replicatedJobs"] if rj["name"] == ids.HEAD_JOB)
    pod: dict[str, Any] = head["template"]["spec"]["template"]["spec"]
    return pod


@pytest.fixture
def pause() -> Iterator[Launched]:
    """The pod sandbox's pause container: PID 1 of the namespace a shared-namespace pod's containers join."""
    sandbox = Launched.as_init([sys.executable, "-I", "-S", "-c", PAUSE])
    assert sandbox.line() == "paused"
    yield sandbox
    sandbox.stop()


def start_main(pod: dict[str, Any], pause: Launched) -> Launched:
    """main as the runtime starts it for ``pod``: in the pod's namespace when the pod shares it, else as PID 1 of a
    namespace of its own."""
    argv = [sys.executable, "-c", HANDLERLESS]
    if pod.get("shareProcessNamespace") is True:
        return Launched.joined(pause.pid, argv, stdin=True)
    return Launched.as_init(argv, stdin=True)


def stopped_as_the_kubelet_stops_it(main: Launched) -> tuple[str, int]:
    """SIGTERM from outside the namespace; then, if main still answers, the grace period is over: SIGKILL. What main
    answered after the SIGTERM ("" when nothing) and its wait status."""
    assert main.line() == "ready"
    os.kill(main.pid, signal.SIGTERM)
    main.send("after the SIGTERM\n")
    answered = main.line()
    if answered == "alive":
        os.kill(main.pid, signal.SIGKILL)
    return answered, main.status()


@needs_namespaces
def test_the_rendered_head_pod_shares_its_process_namespace_and_sigterm_ends_a_handler_less_main_143(
    pause: Launched,
) -> None:
    pod = head_pod()
    assert pod["shareProcessNamespace"] is True
    main = start_main(pod, pause)
    try:
        answered, status = stopped_as_the_kubelet_stops_it(main)
    finally:
        main.stop()
    assert answered == "", "main kept running after SIGTERM"
    assert 128 - status == 143, status  # killed by SIGTERM: the kubelet reports exit code 143


@needs_namespaces
def test_a_head_pod_that_does_not_share_it_makes_main_pid_1_which_ignores_sigterm_until_sigkill_137(
    pause: Launched,
) -> None:
    pod = head_pod(**{"head.share_process_namespace": False})
    assert "shareProcessNamespace" not in pod
    main = start_main(pod, pause)
    try:
        answered, status = stopped_as_the_kubelet_stops_it(main)
    finally:
        main.stop()
    assert answered == "alive", "the kernel delivered SIGTERM to a handler-less PID 1"
    assert 128 - status == 137, status  # SIGKILLed after the grace period: the kubelet reports exit code 137


@needs_namespaces
def test_pid_1_with_a_sigterm_handler_gets_the_signal() -> None:
    """The other half of the kernel's rule: a handler makes PID 1 reachable, so a program that handles SIGTERM (and
    exits 143 or 75 after a last checkpoint, pwdeploy.runtime) stops in time even as PID 1."""
    program = (
        "import signal, sys\n"
        "signal.signal(signal.SIGTERM, lambda s, f: sys.exit(143))\n"
        "print('ready', flush=True)\n"
        "for _ in sys.stdin:\n    print('alive', flush=True)\n"
    )
    main = Launched.as_init([sys.executable, "-c", program], stdin=True)
    try:
        answered, status = stopped_as_the_kubelet_stops_it(main)
    finally:
        main.stop()
    assert answered == ""
    assert status == 143


def test_a_headless_head_pod_has_no_main_and_leaves_the_field_out() -> None:
    assert "shareProcessNamespace" not in head_pod(headless=True)


def test_no_rendered_container_has_a_prestop_hook_so_the_grace_period_is_all_the_programs() -> None:
    """The kubelet runs a container's preStop hook before its SIGTERM, and the hook's time comes out of the grace
    period (kuberuntime_container.go killContainer). pwdeploy renders none, in any golden manifest."""
    golden = REPO / "tests" / "golden"
    hooks = []
    for path in sorted(golden.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")):
            for rj in ((doc or {}).get("spec") or {}).get("replicatedJobs") or []:
                pod = rj["template"]["spec"]["template"]["spec"]
                for c in [*pod.get("initContainers", []), *pod.get("containers", [])]:
                    if (c.get("lifecycle") or {}).get("preStop"):
                        hooks.append(f"{path.name}: {c['name']}")
    assert sorted(golden.glob("*.yaml")) and hooks == []


def _memory_cgroup() -> Path | None:
    """A new memory cgroup (v2's unified tree, else v1's memory controller) this test may write, or None."""
    import uuid

    for root, limit in ((Path("/sys/fs/cgroup"), "memory.max"), (Path("/sys/fs/cgroup/unified"), "memory.max"),
                        (Path("/sys/fs/cgroup/memory"), "memory.limit_in_bytes")):  # fmt: skip
        if not (root / "cgroup.procs").exists():
            continue
        group = root / f"pwdeploy-oom-test-{uuid.uuid4().hex[:8]}"
        try:
            group.mkdir()
        except OSError:
            continue
        if (group / limit).exists():
            return group
        group.rmdir()
    return None


def test_a_process_over_its_containers_memory_limit_is_sigkilled_137_and_counted_as_an_oom_kill() -> None:
    """What a container's memory limit does, on a real memory cgroup: the kernel's OOM killer SIGKILLs the process
    (exit code 137) and counts an oom_kill in the cgroup, which the container runtime reads to report reason
    OOMKilled (containerd's CRI oomExitReason); the head's FailJob rule then fails the JobSet on 137."""
    group = _memory_cgroup()
    if group is None:
        pytest.skip("no memory cgroup can be made here (needs root and a memory controller)")
    limit = 64 << 20
    try:
        (group / ("memory.max" if (group / "memory.max").exists() else "memory.limit_in_bytes")).write_text(str(limit))
        program = f"import os\nbytearray({4 * limit})\nprint('survived')\n"
        joined = f"open({str(group / 'cgroup.procs')!r}, 'w').write(str(os.getpid()))\n"
        done = subprocess.run([sys.executable, "-c", "import os\n" + joined + program], capture_output=True, timeout=60)
        counters = (
            group / ("memory.events" if (group / "memory.events").exists() else "memory.oom_control")
        ).read_text()
    finally:
        group.rmdir()
    assert done.returncode == -signal.SIGKILL and b"survived" not in done.stdout
    oom_kills = dict(line.split() for line in counters.splitlines()).get("oom_kill")
    assert oom_kills is not None and int(oom_kills) >= 1, counters
