"""pwdeploy as a user runs it (the installed command, in a subprocess) against the real control plane, with the
admin's kubeconfig and the namespace-scoped user's; kubectl reads what it wrote."""

from __future__ import annotations

import contextlib
import json
import secrets
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from pwdeploy import identifiers as ids
from tests.control_plane import ControlPlane, NodePool
from tests.control_plane.commands import (
    HEAD_POOL,
    JOB_TESTS,
    PWDEPLOY,
    V5P_2X2X1,
    job_flags,
    kueue_queues,
    pwdeploy,
    status,
    wait_for,
)

pytestmark = JOB_TESTS

CPU = HEAD_POOL
TPU = NodePool("tpu-v5p", nodes=1, tpu=V5P_2X2X1)


@pytest.fixture(scope="module")
def pools(control_plane: ControlPlane) -> Iterator[None]:
    with control_plane.node_pools(CPU, TPU):
        yield


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
    # Issue 38 item 7: the user holds exactly the Role of docs/cluster.md (what the permissions row checks), and
    # every command it names works with it: the row says ok, list and diagnose are not refused.
    checked = pwdeploy(plane, "preflight", *flags, "--cluster", "--no-gcs", "--no-check", "-o", "json")
    rows = {r["check"]: r for r in json.loads(checked.stdout)["checks"] if r["location"] == "control-plane"}
    assert rows["permissions"]["status"] == "ok", rows["permissions"]
    listed = json.loads(pwdeploy(plane, "list", "-n", ns, "-o", "json").stdout)
    assert [(j["name"], j["state"], j["slices"]) for j in listed["jobs"]] == [(name, "Running", "1/1")]
    diagnosed = pwdeploy(plane, "diagnose", name, "-n", ns, "-o", "json")
    assert diagnosed.returncode == 0 and "403" not in diagnosed.stdout + diagnosed.stderr, diagnosed.stderr

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
    created = pwdeploy(plane, "submit", *job_flags(name, ns, "--headless"), "--skip-preflight")
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
        answer = pwdeploy(plane, *connect)  # as the user: the Role grants pods/portforward (docs/cluster.md)
        assert answer.returncode == 0, answer.stderr
        assert answer.stdout.strip().endswith("ping"), answer.stdout
    finally:
        pwdeploy(plane, "delete", name, "-n", ns, "--yes")


def _head(plane: ControlPlane, name: str, namespace: str) -> dict[str, Any] | None:
    try:
        return head_pod(plane, name, namespace)
    except AssertionError:
        return None


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
        workloads = wait_for(  # Kueue's verdict on the quota; PodsReady (WaitForStart) can come before it
            lambda: [
                w
                for w in plane.api.get(f"/apis/kueue.x-k8s.io/v1beta2/namespaces/{ns}/workloads")["items"]
                if too_big in w["metadata"]["name"]
                and any(c.get("type") == "QuotaReserved" for c in (w.get("status") or {}).get("conditions") or [])
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
        # issue 38 item 13: diagnose says why the job restarted (the JobSet controller's restart event)
        found = json.loads(pwdeploy(plane, "diagnose", name, "-n", ns, "-o", "json").stdout)["findings"]
        restarted = [f for f in found if f["cause"] == "restarted"]
        assert restarted and f"{name}-{ids.HEAD_JOB}-0" in restarted[0]["evidence"], found
    finally:
        pwdeploy(plane, "delete", name, "-n", ns, "--yes")


def test_a_render_applied_with_kubectl_is_recognised_by_submit(control_plane: ControlPlane, pools: None) -> None:
    """Issue 38 item 12: `pwdeploy render | kubectl apply -f -` then `pwdeploy submit` of the same config is
    unchanged (kubectl's last-applied record carries the config hash), not refused as another tool's JobSet."""
    plane, ns = control_plane, control_plane.user_namespace
    name = f"ka-{secrets.token_hex(3)}"
    rendered = pwdeploy(plane, "render", *job_flags(name, ns))
    assert rendered.returncode == 0, rendered.stderr
    plane.kubectl("apply", "-f", "-", user=True, input_text=rendered.stdout)
    again = pwdeploy(plane, "submit", *job_flags(name, ns), "--skip-preflight")
    assert again.returncode == 0, again.stderr
    assert "unchanged" in again.stdout + again.stderr, again.stdout + again.stderr


def test_submit_wait_done_follows_the_job_to_its_end(control_plane: ControlPlane, pools: None) -> None:
    """`submit --wait=done` as a script uses it: exit 0 when the head's main exits 0, non-zero when it exits 1
    (the JobSet fails by the rendered podFailurePolicy), each with the state on its last line."""
    plane, ns = control_plane, control_plane.user_namespace
    for code, phase in ((0, "Completed"), (1, "Failed")):
        name = f"wt-{secrets.token_hex(3)}"
        flags = [*job_flags(name, ns), "--skip-preflight", "--wait=done", "--timeout", "150"]
        waiting = subprocess.Popen(
            [str(PWDEPLOY), "submit", *flags], env=plane.env(user=True), stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        try:
            head = wait_for(lambda: _head(plane, name, ns), bool, timeout=90)["metadata"]["name"]  # noqa: B023
            assert waiting.poll() is None  # still waiting while the job runs
            plane.exit_pod(ns, head, code, container=ids.MAIN_CONTAINER)
            out, err = waiting.communicate(timeout=150)
        finally:
            waiting.kill()
        if phase == "Completed":
            assert waiting.returncode == 0, err
            assert f"job {name} is Completed" in out + err
        else:
            assert waiting.returncode != 0, (out, err)
            assert f"job {name} failed" in err, err
            assert "Traceback" not in err
        pwdeploy(plane, "delete", name, "-n", ns, "--yes", "--wait")


def test_profile_asks_the_programs_profiler_server_through_the_port_forward(
    control_plane: ControlPlane, pools: None
) -> None:
    """profile's POST /profiling goes API server -> kubelet (KWOK) -> a loopback stand-in of pathwaysutils'
    profiler server, which answers as the real one does once the trace is written."""
    import socket
    import threading

    plane, ns = control_plane, control_plane.user_namespace
    name = f"pf-{secrets.token_hex(3)}"
    created = pwdeploy(plane, "submit", *job_flags(name, ns, "--profile-dir", "gs://pwdeploy-e2e/profiles"),
                       "--skip-preflight")  # fmt: skip
    assert created.returncode == 0, created.stderr
    head = wait_for(lambda: _head(plane, name, ns), bool, timeout=90)["metadata"]["name"]
    listener = socket.create_server(("127.0.0.1", 0))
    asked: list[bytes] = []

    def serve() -> None:
        with listener:
            while True:
                conn, _ = listener.accept()
                with conn:
                    conn.settimeout(10)
                    data = b""
                    with contextlib.suppress(OSError):
                        while b"\r\n\r\n" not in data or not data.rstrip().endswith(b"}"):
                            chunk = conn.recv(4096)
                            if not chunk:
                                break
                            data += chunk
                        if data:
                            asked.append(data)
                            body = b'{"response": "profiling completed"}'
                            lines = f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {len(body)}"
                            conn.sendall(lines.encode() + b"\r\n\r\n" + body)

    threading.Thread(target=serve, daemon=True).start()
    plane.forward_port(ns, head, ids.PROFILER_PORT, listener.getsockname()[1])
    answer = pwdeploy(plane, "profile", name, "-n", ns, "--duration", "2")
    assert answer.returncode == 0, answer.stderr
    assert "gs://pwdeploy-e2e/profiles/plugins/profile/" in answer.stdout, answer.stdout
    request = next(a for a in asked if a.startswith(b"POST "))
    head_part, _, body = request.partition(b"\r\n\r\n")
    assert head_part.startswith(b"POST /profiling HTTP/1.1")
    assert json.loads(body) == {"duration_ms": 2000, "repository_path": "gs://pwdeploy-e2e/profiles"}

    headless = f"ph-{secrets.token_hex(3)}"  # refused before anything is traced (issue 38 item 14)
    assert pwdeploy(plane, "submit", *job_flags(headless, ns, "--headless"), "--skip-preflight").returncode == 0
    refused = pwdeploy(plane, "profile", headless, "-n", ns, "--duration", "2")
    assert refused.returncode != 0 and "headless" in refused.stderr, refused.stderr
    assert "tracing" not in refused.stderr


def test_an_apply_that_meets_another_field_managers_values_is_a_clear_conflict(
    control_plane: ControlPlane, pools: None
) -> None:
    """pwdeploy applies without force: when another field manager set the same fields to other values (a job
    created by hand between pwdeploy's read and its apply), the API server's 409 names that manager, and pwdeploy
    says so without overwriting anything."""
    from pwdeploy.cluster import jobsets as js
    from pwdeploy.kube.api_errors import ApiError
    from pwdeploy.kube.kubeconfig import load_kube

    plane, ns = control_plane, "default"
    name = f"fm-{secrets.token_hex(3)}"
    rendered = pwdeploy(plane, "render", *job_flags(name, ns), user=False)
    assert rendered.returncode == 0, rendered.stderr
    theirs = plane.kubectl(
        "apply", "--server-side", "--field-manager=someone-else", "-f", "-", input_text=rendered.stdout.replace(
            "print(1)", "print(2)"
        ),
    )  # fmt: skip
    assert theirs.returncode == 0, theirs.stderr
    ours = next(d for d in yaml.safe_load_all(rendered.stdout) if d and d.get("kind") == "JobSet")
    kube = load_kube(plane.admin_kubeconfig)
    with pytest.raises(ApiError) as caught:
        js.apply_jobset(kube, ours, dry_run=False)
    assert caught.value.status == 409
    assert "someone-else" in str(caught.value), str(caught.value)
    kept = json.loads(plane.kubectl("get", "jobset", name, "-n", ns, "-o", "json").stdout)
    assert "print(2)" in json.dumps(kept)  # theirs stands
