"""pwdeploy as a user runs it (the installed command, in a subprocess) against the real control plane, with the
admin's kubeconfig and the namespace-scoped user's; kubectl reads what it wrote."""

from __future__ import annotations

import contextlib
import json
import secrets
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from pwdeploy import identifiers as ids
from tests.control_plane import ControlPlane, NodePool, TpuPool

pytestmark = [
    pytest.mark.control_plane,
    pytest.mark.slow,
    pytest.mark.timeout(300),
    pytest.mark.usefixtures("no_jobs_left"),
]

PWDEPLOY = Path(sys.executable).with_name("pwdeploy")
CPU = NodePool("cpu-np", nodes=1, cpu="64", memory="256Gi")
TPU = NodePool("tpu-v5p", nodes=1, tpu=TpuPool("tpu-v5p-slice", "2x2x1", 4))


@pytest.fixture(scope="module")
def pools(control_plane: ControlPlane) -> Iterator[None]:
    with control_plane.node_pools(CPU, TPU):
        yield


def pwdeploy(
    plane: ControlPlane, *args: str, user: bool = True, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(PWDEPLOY), *args], env=plane.env(user=user), capture_output=True, text=True, timeout=timeout, check=False
    )


def job_flags(name: str, namespace: str, *extra: str) -> list[str]:
    return [
        "--name", name, "--namespace", namespace, "--tpu-type", "v5p-8", "--num-slices", "1",
        "--image", "python:3.11.9-slim", "--command", "python3 -c 'print(1)'",
        "--gcs-scratch", "gs://pwdeploy-e2e/scratch", *extra,
    ]  # fmt: skip


def wait_for(get: Callable[[], Any], holds: Callable[[Any], bool], timeout: float = 60) -> Any:
    deadline = time.monotonic() + timeout
    value = get()
    while not holds(value):
        if time.monotonic() > deadline:
            raise AssertionError(f"not after {timeout} s: {str(value)[:1500]}")
        time.sleep(0.5)
        value = get()
    return value


def status(plane: ControlPlane, name: str, namespace: str, user: bool = True) -> dict[str, Any]:
    answer = pwdeploy(plane, "status", name, "-n", namespace, "-o", "json", user=user)
    assert answer.returncode == 0, answer.stderr
    parsed: dict[str, Any] = json.loads(answer.stdout)
    return parsed


def head_pod(plane: ControlPlane, name: str, namespace: str) -> dict[str, Any]:
    pods = plane.pods(
        namespace, f"jobset.sigs.k8s.io/jobset-name%3D{name},jobset.sigs.k8s.io/replicatedjob-name%3Dpathways-head"
    )
    live = [p for p in pods if not p["metadata"].get("deletionTimestamp") and p["status"].get("phase") == "Running"]
    assert live, [p["metadata"]["name"] for p in pods]
    return live[0]


def test_a_job_through_its_life_as_the_namespace_scoped_user(control_plane: ControlPlane, pools: None) -> None:
    plane, ns = control_plane, control_plane.user_namespace
    name = f"cli-{secrets.token_hex(3)}"
    flags = job_flags(name, ns)

    dry = pwdeploy(plane, "submit", *flags, "--skip-preflight", "--dry-run=server")
    assert dry.returncode == 0, dry.stderr
    assert plane.kubectl("get", "jobsets", "-n", ns, "-o", "name").stdout.strip() == ""  # nothing persisted

    created = pwdeploy(plane, "submit", *flags, "--skip-preflight")
    assert created.returncode == 0, created.stderr
    jobset = json.loads(plane.kubectl("get", "jobset", name, "-n", ns, "-o", "json", "--show-managed-fields").stdout)
    assert jobset["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "pwdeploy"
    managers = {m["manager"] for m in jobset["metadata"]["managedFields"]}
    assert "pwdeploy" in managers

    again = pwdeploy(plane, "submit", *flags, "--skip-preflight")
    assert again.returncode == 0, again.stderr
    assert "unchanged" in again.stdout + again.stderr
    later = json.loads(plane.kubectl("get", "jobset", name, "-n", ns, "-o", "json").stdout)
    assert later["metadata"]["generation"] == jobset["metadata"]["generation"]  # the spec was not written again

    changed = pwdeploy(plane, "submit", *job_flags(name, ns, "--env", "X=1"), "--skip-preflight")
    assert changed.returncode != 0
    assert "--replace" in changed.stderr

    # Running once the JobSet controller counts every Job ready, which follows the pods' Running by a moment.
    running = wait_for(
        lambda: status(plane, name, ns),
        lambda s: s["state"]["phase"] == "Running" or s["state"]["phase"] not in ("Pending", "Starting"),
    )
    assert running["state"]["phase"] == "Running", running["state"]
    assert all(g["running"] == g["expected"] for g in running["groups"]), running["groups"]
    # As the admin: the Role preflight's permissions row checks lacks list jobsets (the user gets 403).
    listed = json.loads(pwdeploy(plane, "list", "-n", ns, "-o", "json", user=False).stdout)
    assert [(j["name"], j["state"], j["slices"]) for j in listed["jobs"]] == [(name, "Running", "1/1")]

    head = head_pod(plane, name, ns)["metadata"]["name"]
    plane.write_pod_log(ns, head, ["training step 1", "training step 2"], container="main")
    logs = pwdeploy(plane, "logs", name, "-n", ns)
    assert logs.returncode == 0, logs.stderr
    assert "training step 2" in logs.stdout

    plane.exit_pod(ns, head, 0, container="main")
    done = wait_for(lambda: status(plane, name, ns), lambda s: s["state"]["phase"] in ("Completed", "Failed"))
    assert done["state"]["phase"] == "Completed", done["state"]

    deleted = pwdeploy(plane, "delete", name, "-n", ns, "--yes", "--wait")
    assert deleted.returncode == 0, deleted.stderr
    assert plane.kubectl("get", "jobsets,jobs,pods", "-n", ns, "-o", "name").stdout.strip() == ""


def test_preflight_reads_the_real_cluster_as_the_admin(control_plane: ControlPlane, pools: None) -> None:
    answer = pwdeploy(
        control_plane,
        "preflight", *job_flags("pf-a", "default"), "--cluster", "--no-gcs", "--no-check", "-o", "json",
        user=False,
    )  # fmt: skip
    rows = {row["check"]: row for row in json.loads(answer.stdout)["checks"] if row["location"] == "control-plane"}
    for check in ("kubernetes-version", "jobset-api", "namespace", "permissions", "tpu-capacity", "head-capacity"):
        assert rows[check]["status"] == "ok", rows[check]
    assert "v1.35" in rows["kubernetes-version"]["detail"]


def test_connect_forwards_through_the_api_servers_port_forward(control_plane: ControlPlane, pools: None) -> None:
    """A headless job: connect waits for the proxy's ready line (KWOK serves the log a test writes), then its
    forward goes API server -> kubelet (KWOK) -> a loopback stand-in of the proxy port, which echoes."""
    import socket
    import threading

    plane, ns = control_plane, control_plane.user_namespace
    name = f"cx-{secrets.token_hex(3)}"
    created = pwdeploy(plane, "submit", *job_flags(name, ns, "--headless"), "--skip-preflight", user=False)
    assert created.returncode == 0, created.stderr
    try:
        head = wait_for(lambda: _head(plane, name, ns), bool)["metadata"]["name"]
        listener = socket.create_server(("127.0.0.1", 0))
        echo_port = listener.getsockname()[1]

        def echo() -> None:  # every connection (connect opens one stream first, to check that it may)
            with listener:
                while True:
                    conn, _ = listener.accept()
                    with conn:
                        conn.settimeout(5)
                        with contextlib.suppress(OSError):
                            conn.sendall(conn.recv(64))

        threading.Thread(target=echo, daemon=True).start()
        plane.forward_port(ns, head, ids.PROXY_PORT, echo_port)
        plane.write_pod_log(ns, head, ["IFRT proxy server started with status OK"], container=ids.PROXY_CONTAINER)
        client = (
            "import os, socket; host, port = os.environ['JAX_BACKEND_TARGET'][len('grpc://'):].rsplit(':', 1); "
            "s = socket.create_connection((host, int(port))); s.sendall(b'ping'); print(s.recv(64).decode())"
        )
        connect = ["connect", name, "-n", ns, "--local-port", "0", "--", sys.executable, "-c", client]
        answer = pwdeploy(plane, *connect, user=False)  # the user's Role lacks pods/portforward (docs/cluster.md)
        assert answer.returncode == 0, answer.stderr
        assert answer.stdout.strip().endswith("ping"), answer.stdout
    finally:
        pwdeploy(plane, "delete", name, "-n", ns, "--yes", user=False)


def _head(plane: ControlPlane, name: str, namespace: str) -> dict[str, Any] | None:
    try:
        return head_pod(plane, name, namespace)
    except AssertionError:
        return None


def kueue_queues(plane: ControlPlane, namespace: str, tpu_quota: int) -> None:
    """A ResourceFlavor, a ClusterQueue with ``tpu_quota`` chips (and room for the head) and a LocalQueue ``lq``."""
    plane.api.apply({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": "rf"}})
    quotas = [("cpu", "1000"), ("memory", "10Ti"), ("google.com/tpu", str(tpu_quota))]
    plane.api.apply(
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "ClusterQueue",
            "metadata": {"name": "cq"},
            "spec": {
                "namespaceSelector": {},
                "resourceGroups": [
                    {
                        "coveredResources": [q[0] for q in quotas],
                        "flavors": [{"name": "rf", "resources": [{"name": n, "nominalQuota": v} for n, v in quotas]}],
                    }
                ],
            },
        }
    )
    plane.api.apply(
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "LocalQueue",
            "metadata": {"name": "lq", "namespace": namespace},
            "spec": {"clusterQueue": "cq"},
        }
    )


def test_kueue_admits_what_fits_its_quota_and_says_why_not_otherwise(control_plane: ControlPlane, pools: None) -> None:
    plane, ns = control_plane, "default"
    kueue_queues(plane, ns, tpu_quota=4)
    fits, too_big = f"kq-{secrets.token_hex(3)}", f"kq-{secrets.token_hex(3)}"
    try:
        first = pwdeploy(plane, "submit", *job_flags(fits, ns, "--queue", "lq"), "--skip-preflight", user=False)
        assert first.returncode == 0, first.stderr
        running = wait_for(  # admitted: unsuspended, then every pod runs
            lambda: status(plane, fits, ns, user=False),
            lambda s: s["state"]["phase"] != "Suspended" and all(g["running"] == g["expected"] for g in s["groups"]),
            timeout=120,
        )
        assert running["state"]["phase"] in ("Starting", "Running"), running["state"]
        flags = job_flags(too_big, ns, "--queue", "lq")
        flags[flags.index("--num-slices") + 1] = "2"
        second = pwdeploy(plane, "submit", *flags, "--skip-preflight", user=False)
        assert second.returncode == 0, second.stderr
        workloads = wait_for(
            lambda: [
                w
                for w in plane.api.get(f"/apis/kueue.x-k8s.io/v1beta2/namespaces/{ns}/workloads")["items"]
                if too_big in w["metadata"]["name"] and (w.get("status") or {}).get("conditions")
            ],
            bool,
        )
        said = json.dumps(workloads[0]["status"]["conditions"])
        diagnosed = pwdeploy(plane, "diagnose", too_big, "-n", ns, "-o", "json", user=False)
        assert too_big and "maximum capacity" in said, said
        assert diagnosed.returncode != 0 or "quota" in diagnosed.stdout, (said, diagnosed.stdout)
    finally:
        for name in (fits, too_big):
            pwdeploy(plane, "delete", name, "-n", ns, "--yes", user=False)


def test_after_a_restart_status_shows_the_new_attempts_pods(control_plane: ControlPlane, pools: None) -> None:
    plane, ns = control_plane, control_plane.user_namespace
    name = f"rs-{secrets.token_hex(3)}"
    created = pwdeploy(plane, "submit", *job_flags(name, ns, "--max-restarts", "2"), "--skip-preflight")
    assert created.returncode == 0, created.stderr
    try:
        wait_for(lambda: status(plane, name, ns), lambda s: all(g["running"] == g["expected"] for g in s["groups"]))
        old_head = head_pod(plane, name, ns)["metadata"]["name"]
        plane.exit_pod(ns, old_head, ids.RETRY_EXIT_CODE, container=ids.MAIN_CONTAINER)
        after = wait_for(
            lambda: status(plane, name, ns),
            lambda s: s["state"]["restarts"] == 1 and all(g["running"] == g["expected"] for g in s["groups"]),
            timeout=90,
        )
        assert after["state"]["phase"] in ("Starting", "Running"), after["state"]  # not the failed attempt's
        assert old_head not in {p["pod"] for p in after["pods"]}, after["pods"]
        assert {p["state"] for p in after["pods"]} == {"Running"}, after["pods"]
    finally:
        pwdeploy(plane, "delete", name, "-n", ns, "--yes")
