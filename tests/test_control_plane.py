"""The control plane itself, as kubectl sees it: TLS, both ways of authenticating, RBAC, the webhooks the API
server calls, KWOK's nodes and pods (running, ending with a chosen exit code, serving logs) and the scheduler's
placement on GKE-labelled TPU node pools."""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator
from typing import Any

import pytest

from tests.control_plane import ControlPlane, NodePool, TpuPool
from tests.control_plane.api import ApiError
from tests.control_plane.commands import wait_for

pytestmark = [pytest.mark.control_plane, pytest.mark.slow, pytest.mark.timeout(240)]  # the first test starts the plane

TPU = NodePool("plane-tpu", nodes=2, tpu=TpuPool("tpu-v5p-slice", "2x2x2", 4))


@pytest.fixture(scope="module")
def pools(control_plane: ControlPlane) -> Iterator[list[str]]:
    with control_plane.node_pools(TPU) as names:
        yield names


def tpu_pod(name: str, chips: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "restartPolicy": "Never",
            "nodeSelector": {"cloud.google.com/gke-tpu-accelerator": "tpu-v5p-slice"},
            "tolerations": [{"key": "google.com/tpu", "operator": "Exists", "effect": "NoSchedule"}],
            "containers": [
                {
                    "name": "work",
                    "image": "python:3.12-slim",
                    "resources": {"requests": {"google.com/tpu": str(chips)}, "limits": {"google.com/tpu": str(chips)}},
                }
            ],
        },
    }


def test_the_user_is_who_the_token_says_and_may_do_only_what_its_role_grants(control_plane: ControlPlane) -> None:
    whoami = json.loads(control_plane.kubectl("auth", "whoami", "-o", "json", user=True).stdout)
    assert whoami["status"]["userInfo"]["username"] == "alice"
    ns = control_plane.user_namespace
    allowed = control_plane.kubectl("auth", "can-i", "create", "jobsets.jobset.x-k8s.io", "-n", ns, user=True)
    assert allowed.stdout.strip() == "yes"
    elsewhere = control_plane.kubectl(
        "auth", "can-i", "create", "jobsets.jobset.x-k8s.io", "-n", "default", user=True, check=False
    )
    assert elsewhere.stdout.strip() == "no"
    nodes = control_plane.kubectl("get", "nodes", user=True, check=False)
    assert nodes.returncode != 0 and "forbidden" in nodes.stderr
    admin = json.loads(control_plane.kubectl("auth", "whoami", "-o", "json").stdout)["status"]["userInfo"]
    assert admin["username"] == "admin" and "system:masters" in admin["groups"]


def test_the_jobset_webhook_is_called_and_refuses_what_it_refuses(control_plane: ControlPlane) -> None:
    """A JobSet whose name is over the webhook's bound: the API server asks JobSet's validating webhook over TLS
    and returns its refusal."""
    jobset = {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": "a" * 60, "namespace": "default"},
        "spec": {
            "replicatedJobs": [
                {
                    "name": "w",
                    "replicas": 1,
                    "template": {
                        "spec": {
                            "template": {
                                "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox"}]}
                            }
                        }
                    },
                }
            ]
        },
    }
    with pytest.raises(ApiError) as refused:
        control_plane.api.request("POST", "/apis/jobset.x-k8s.io/v1alpha2/namespaces/default/jobsets", jobset)
    assert refused.value.status == 403  # an admission webhook's denial is Forbidden
    assert refused.value.message.startswith('admission webhook "vjobset.kb.io" denied the request: ')
    assert "job names generated for this JobSet will exceed 63 characters" in refused.value.message


def test_a_pod_is_placed_on_a_tpu_node_runs_logs_and_exits_with_the_chosen_code(
    control_plane: ControlPlane, pools: list[str]
) -> None:
    name = f"tpu-{secrets.token_hex(3)}"
    control_plane.api.request("POST", "/api/v1/namespaces/default/pods", tpu_pod(name, 4))
    path = f"/api/v1/namespaces/default/pods/{name}"
    pod = wait_for(lambda: control_plane.api.get(path), lambda p: p["status"].get("phase") == "Running", 30, 0.2)
    assert pod["spec"]["nodeName"] in pools
    control_plane.write_pod_log("default", name, ["step 1", "step 2"])
    logs = control_plane.kubectl("logs", name, "-n", "default").stdout
    assert logs.splitlines() == ["step 1", "step 2"]
    control_plane.exit_pod("default", name, 3)
    pod = wait_for(lambda: control_plane.api.get(path), lambda p: p["status"].get("phase") == "Failed", 30, 0.2)
    assert pod["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 3
    control_plane.kubectl("delete", "pod", name, "-n", "default", "--wait=true")


def test_the_scheduler_says_why_a_pod_does_not_fit(control_plane: ControlPlane, pools: list[str]) -> None:
    name = f"big-{secrets.token_hex(3)}"
    control_plane.api.request("POST", "/api/v1/namespaces/default/pods", tpu_pod(name, 8))

    def events() -> list[dict[str, Any]]:
        query = f"?fieldSelector=involvedObject.name%3D{name}"
        return list(control_plane.api.get(f"/api/v1/namespaces/default/events{query}")["items"])

    found = wait_for(events, lambda items: any(e.get("reason") == "FailedScheduling" for e in items), 30, 0.2)
    message = next(e["message"] for e in found if e.get("reason") == "FailedScheduling")
    assert "Insufficient google.com/tpu" in message, message
    control_plane.kubectl("delete", "pod", name, "-n", "default", "--wait=true")


def test_a_node_keeps_its_heartbeat_so_it_stays_ready(control_plane: ControlPlane, pools: list[str]) -> None:
    """The node lifecycle controller marks a node NotReady 50 s after its last heartbeat (and then its pods not
    Ready): KWOK's heartbeat Stage must move lastHeartbeatTime on well before that."""

    def beat() -> str:
        node = control_plane.api.get(f"/api/v1/nodes/{pools[0]}")
        ready = next(c for c in node["status"]["conditions"] if c["type"] == "Ready")
        assert ready["status"] == "True", ready
        return str(ready["lastHeartbeatTime"])

    first = beat()
    wait_for(beat, lambda now: now != first, timeout=30, every=0.2)


def test_a_pod_marked_not_ready_by_the_node_controller_is_ready_again_as_a_kubelet_puts_it_back(
    control_plane: ControlPlane, pools: list[str]
) -> None:
    """Under load a node's heartbeat can come late and the node lifecycle controller then marks its pods not Ready
    (only the Ready condition: MarkPodsNotReady). A kubelet puts its own status back at its next sync; KWOK's
    pod-ready-again Stage plays that, so a 1,000-pod job's JobSet does not stay short of ready for good."""
    name = f"ready-{secrets.token_hex(3)}"
    control_plane.api.request("POST", "/api/v1/namespaces/default/pods", tpu_pod(name, 4))
    path = f"/api/v1/namespaces/default/pods/{name}"

    def ready(pod: dict[str, Any]) -> str:
        return next(str(c["status"]) for c in pod["status"].get("conditions") or [] if c["type"] == "Ready")

    pod = wait_for(lambda: control_plane.api.get(path), lambda p: p["status"].get("phase") == "Running", 30, 0.2)
    assert ready(pod) == "True"
    conditions = [{**c, "status": "False"} if c["type"] == "Ready" else c for c in pod["status"]["conditions"]]
    patch = {"metadata": {"resourceVersion": pod["metadata"]["resourceVersion"]}, "status": {"conditions": conditions}}
    marked = control_plane.api.request("PATCH", f"{path}/status", patch, content_type="application/merge-patch+json")
    assert ready(marked) == "False"
    again = wait_for(lambda: control_plane.api.get(path), lambda p: ready(p) == "True", 40, 0.5)
    assert {c["type"]: c["status"] for c in again["status"]["conditions"]} == {
        c["type"]: "True" for c in pod["status"]["conditions"]
    }
    control_plane.kubectl("delete", "pod", name, "-n", "default", "--wait=true")


def test_etcd_answers_only_a_client_with_a_certificate_of_the_planes_ca(control_plane: ControlPlane) -> None:
    """On a plain http port of 127.0.0.1 etcd answered every local user, RBAC aside: the cluster's Secrets and its
    state, to read and to write. Now a request without the CA's client certificate gets nothing, over http or TLS,
    while the API server (which holds one) works."""
    import base64
    import ssl
    import urllib.error
    import urllib.request

    everything = json.dumps({"key": base64.b64encode(b"/").decode(), "range_end": "AA=="}).encode()
    url = f"127.0.0.1:{control_plane.etcd_port}/v3/kv/range"
    try:
        with urllib.request.urlopen(f"http://{url}", data=everything, timeout=10) as answer:
            read = answer.read()
    except urllib.error.HTTPError as error:
        read = error.read()  # Go's TLS server answers http with 400 "Client sent an HTTP request to an HTTPS server"
    except ConnectionError:  # or closes the connection (etcd 3.6)
        read = b""
    assert b'"kvs"' not in read, read[:200]
    trusting = ssl.create_default_context(cafile=str(control_plane.ca.cert))
    with pytest.raises((ssl.SSLError, ConnectionError, urllib.error.URLError)):
        urllib.request.urlopen(f"https://{url}", data=everything, timeout=10, context=trusting)
    assert control_plane.kubectl("get", "namespaces", "-o", "name").stdout  # the API server reaches it


def test_the_planes_secrets_are_readable_by_this_user_alone(control_plane: ControlPlane) -> None:
    folder = control_plane.folder
    secret = [p for p in folder.rglob("*") if p.suffix in (".key", ".kubeconfig") or p.name == "tokens.csv"]
    assert {p.name for p in secret} >= {"ca.key", "sa.key", "admin.kubeconfig", "user.kubeconfig", "tokens.csv"}
    assert {p.name: oct(p.stat().st_mode & 0o777) for p in secret if p.stat().st_mode & 0o077} == {}
    assert folder.stat().st_mode & 0o777 == 0o700
