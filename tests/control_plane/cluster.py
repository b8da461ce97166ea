"""Start and stop the control plane (see the package's docstring for what tests use of it)."""

from __future__ import annotations

import base64
import contextlib
import datetime
import functools
import json
import os
import secrets
import shutil
import ssl
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tests.control_plane import binaries, kwok, pki
from tests.control_plane.api import Api, ApiError
from tests.control_plane.processes import Process, StartError, free_port, https_ok, port_open, wait_until

USER = "alice"  # the namespace-scoped user
USER_NAMESPACE = "team"
SERVICE_CIDR = "10.96.0.0/16"
TPU_TAINT = {"key": "google.com/tpu", "value": "present", "effect": "NoSchedule"}
START_TIMEOUT = 60.0
KUEUE_PODS_READY_S = 20  # Kueue's waitForPodsReady.timeout (and so recoveryTimeout) on this control plane
FAST_YAML = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml: the CRDs are 2.4 MB of YAML
CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
POOL_LABEL = "pwdeploy.test/pool"  # which NodePool made a node (its gke-nodepool label may be another)


@dataclass(frozen=True)
class TpuPool:
    """A GKE TPU node pool: one node per VM of a slice, labelled and tainted as GKE does."""

    accelerator: str  # cloud.google.com/gke-tpu-accelerator, e.g. tpu-v5p-slice
    topology: str  # cloud.google.com/gke-tpu-topology, e.g. 2x2x1
    chips: int  # google.com/tpu per node (chips per VM)


@dataclass(frozen=True)
class NodePool:
    name: str  # cloud.google.com/gke-nodepool (unless labels sets it) and the nodes' names: NAME-0, NAME-1, ...
    nodes: int = 1
    cpu: str = "8"
    memory: str = "32Gi"
    tpu: TpuPool | None = None
    labels: Mapping[str, str] = field(default_factory=dict)
    taints: Sequence[Mapping[str, str]] = ()  # besides a TPU pool's google.com/tpu=present:NoSchedule

    def manifests(self) -> list[dict[str, Any]]:
        return [self._node(i) for i in range(self.nodes)]

    def _node(self, index: int) -> dict[str, Any]:
        name = f"{self.name}-{index}"
        labels = {
            "kubernetes.io/hostname": name,
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64",
            "cloud.google.com/gke-nodepool": self.name,
            POOL_LABEL: self.name,
            **self.labels,
        }
        capacity = {"cpu": self.cpu, "memory": self.memory, "pods": "110"}
        taints = [dict(t) for t in self.taints]
        if self.tpu is not None:
            labels["cloud.google.com/gke-tpu-accelerator"] = self.tpu.accelerator
            labels["cloud.google.com/gke-tpu-topology"] = self.tpu.topology
            capacity["google.com/tpu"] = str(self.tpu.chips)
            taints.append(dict(TPU_TAINT))
        return {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": name, "labels": labels, "annotations": {"kwok.x-k8s.io/node": "fake"}},
            "spec": {"taints": taints} if taints else {},
            "status": {"capacity": capacity, "allocatable": dict(capacity)},
        }


def check_private(folder: Path) -> None:
    """StartError unless ``folder`` is a folder of this user's that no one else may enter (0700, not a link): the
    plane's keys, tokens and kubeconfigs go there, and scripts/control-plane.sh prints its ``env`` to be eval-ed."""
    import stat

    found = folder.lstat()
    if not stat.S_ISDIR(found.st_mode) or found.st_uid != os.getuid() or found.st_mode & 0o077:
        kind = "a folder" if stat.S_ISDIR(found.st_mode) else "not a folder"
        raise StartError(
            f"the control plane's folder {folder} is not private ({kind}, owner uid {found.st_uid}, mode "
            f"{stat.S_IMODE(found.st_mode):o}): it must be this user's (uid {os.getuid()}) with mode 700; remove it"
        )


class ControlPlane:
    def __init__(self, folder: Path, bin_dir: Path) -> None:
        check_private(folder)
        self.folder = folder
        self.bin = bin_dir
        self.logs = folder / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        self.processes: list[Process] = []
        self.admin_kubeconfig = folder / "admin.kubeconfig"
        self.user_kubeconfig = folder / "user.kubeconfig"
        self.user_namespace = USER_NAMESPACE
        self.server = ""
        self.etcd_port = 0  # its client port: TLS, and a certificate of the plane's CA
        self.api: Api
        self.started_in = 0.0
        self._pod_logs = folder / "pod-logs"
        self._pod_logs.mkdir(exist_ok=True)
        self._log_files: dict[tuple[str, str], dict[str | None, Path]] = {}
        self.audit_log = self.logs / "audit.log"
        self.etcd_client: pki.Pair | None = None  # the API server's client certificate for etcd (compact_etcd's)

    # ------------------------------------------------------------------------------------------- what tests use

    def env(self, *, user: bool = False) -> dict[str, str]:
        """The environment a pwdeploy or kubectl process gets: KUBECONFIG (admin, or the namespace-scoped user's)."""
        return {**os.environ, "KUBECONFIG": str(self.user_kubeconfig if user else self.admin_kubeconfig)}

    def kubectl(
        self, *args: str, user: bool = False, check: bool = True, input_text: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        answer = subprocess.run(
            ["kubectl", *args],
            env=self.env(user=user),
            input=input_text,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        if check and answer.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)}: exit {answer.returncode}\n{answer.stderr}")
        return answer

    def add_node_pool(self, pool: NodePool) -> list[str]:
        """Create the pool's nodes and wait until KWOK reports them Ready; their names."""
        nodes = pool.manifests()
        for node in nodes:
            self.api.request("POST", "/api/v1/nodes", node)
        for node in nodes:
            name = node["metadata"]["name"]
            self.api.wait(f"/api/v1/nodes/{name}", _ready, 30, f"node {name} Ready")
        return [n["metadata"]["name"] for n in nodes]

    def remove_node_pool(self, name: str) -> None:
        nodes = self.api.get(f"/api/v1/nodes?labelSelector={POOL_LABEL}%3D{name}")["items"]
        for node in nodes:
            self.api.delete({"kind": "Node", "metadata": {"name": node["metadata"]["name"]}})

    @contextlib.contextmanager
    def node_pools(self, *pools: NodePool) -> Iterator[list[str]]:
        """The pools for the time of a ``with``; removed after."""
        names: list[str] = []
        try:
            for pool in pools:
                names += self.add_node_pool(pool)
            yield names
        finally:
            for pool in pools:
                self.remove_node_pool(pool.name)

    def exit_pod(self, namespace: str, pod: str, code: int, container: str | None = None) -> None:
        """End the running pod's containers with ``code`` (only ``container``'s; the others with 0)."""
        annotations = {kwok.EXIT_CODE: str(code)}
        if container is not None:
            annotations[kwok.EXIT_CONTAINER] = container
        self.api.request(
            "PATCH",
            f"/api/v1/namespaces/{namespace}/pods/{pod}",
            {"metadata": {"annotations": annotations}},
            "application/merge-patch+json",
        )

    def restart_container(self, namespace: str, pod: str, container: str, code: int) -> int:
        """What a kubelet reports when a container of a ``restartPolicy: OnFailure`` pod (a worker) exits with
        ``code`` and is started again: its restartCount goes up by one, lastState holds the exit. The new count."""
        path = f"/api/v1/namespaces/{namespace}/pods/{pod}"
        statuses = self.api.get(path)["status"].get("containerStatuses") or []
        mine = next(c for c in statuses if c.get("name") == container)
        count = int(mine.get("restartCount") or 0) + 1
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        restarted = {
            "name": container,
            "restartCount": count,
            "lastState": {"terminated": {"exitCode": code, "reason": "Error", "startedAt": now, "finishedAt": now}},
            "state": {"running": {"startedAt": now}},
        }
        body = {"status": {"containerStatuses": [restarted]}}
        self.api.request("PATCH", f"{path}/status", body, "application/strategic-merge-patch+json")
        return count

    def write_pod_log(
        self, namespace: str, pod: str, lines: Sequence[str], container: str | None = None, append: bool = False
    ) -> None:
        """What the pod's logs serve (``kubectl logs``, pwdeploy's logs): ``lines``, for ``container`` or, without
        it, for every container that has no lines of its own. ``append``: after the lines written before (a
        follow sees them arrive). KWOK reads the file as a kubelet reads a container's log (CRI format)."""
        path = self._pod_logs / f"{namespace}.{pod}.{container or 'all'}.log"
        now = datetime.datetime.now(datetime.UTC)  # to the microsecond, as a kubelet stamps (nanoseconds)
        stamp = now.strftime("%Y-%m-%dT%H:%M:%S.%f000Z")
        with path.open("a" if append else "w") as out:
            out.writelines(f"{stamp} stdout F {line}\n" for line in lines)
        files = self._log_files.setdefault((namespace, pod), {})
        files[container] = path
        logs: list[dict[str, Any]] = [
            {"logsFile": str(f), **({"containers": [c]} if c is not None else {})} for c, f in files.items()
        ]
        self.api.apply(
            {
                "apiVersion": "kwok.x-k8s.io/v1alpha1",
                "kind": "Logs",
                "metadata": {"name": pod, "namespace": namespace},
                "spec": {"logs": logs},
            }
        )

    def forward_port(self, namespace: str, pod: str, port: int, to_port: int) -> None:
        """The pod's ``port`` through the API server's port-forward reaches 127.0.0.1:``to_port`` on this machine."""
        self.api.apply(
            {
                "apiVersion": "kwok.x-k8s.io/v1alpha1",
                "kind": "PortForward",
                "metadata": {"name": pod, "namespace": namespace},
                "spec": {"forwards": [{"ports": [port], "target": {"port": to_port, "address": "127.0.0.1"}}]},
            }
        )

    def evict(self, namespace: str, pod: str) -> None:
        """The Eviction API (as a drain does): the pod gets DisruptionTarget and is deleted."""
        body = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": pod, "namespace": namespace}}
        self.api.request("POST", f"/api/v1/namespaces/{namespace}/pods/{pod}/eviction", body)

    def pods(self, namespace: str, selector: str = "") -> list[dict[str, Any]]:
        query = f"?labelSelector={selector}" if selector else ""
        items = self.api.get(f"/api/v1/namespaces/{namespace}/pods{query}")["items"]
        return list(items)

    def clear_jobs(self, *namespaces: str, timeout: float = 90) -> None:
        """Delete every JobSet in ``namespaces`` (or default and the user's) and wait until none of their pods is left:
        a test's pods hold their nodes' TPUs and host ports until they are gone, and the next test needs both."""
        spaces = namespaces or ("default", self.user_namespace)
        for ns in spaces:
            for jobset in self.api.get(f"/apis/jobset.x-k8s.io/v1alpha2/namespaces/{ns}/jobsets")["items"]:
                name = jobset["metadata"]["name"]
                with contextlib.suppress(ApiError):  # gone meanwhile
                    self.api.request(
                        "DELETE",
                        f"/apis/jobset.x-k8s.io/v1alpha2/namespaces/{ns}/jobsets/{name}",
                        {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": "Foreground"},
                    )
        deadline = time.monotonic() + timeout
        of_jobsets = "jobset.sigs.k8s.io/jobset-name"  # a label that exists
        cut: set[tuple[str, str]] = set()
        left = [(ns, p["metadata"]["name"]) for ns in spaces for p in self.pods(ns, of_jobsets)]
        while left:
            if time.monotonic() > deadline:
                raise AssertionError(self.failure(f"pods left {timeout:.0f} s after their JobSets' deletion: {left}"))
            for ns, pod in set(left) - cut:  # KWOK stops a pod at its deletionTimestamp, as a kubelet's SIGKILL
                self._delete_now(ns, pod)  # comes: a clean-up need not wait out each pod's grace period
                cut.add((ns, pod))
            time.sleep(0.5)
            left = [(ns, p["metadata"]["name"]) for ns in spaces for p in self.pods(ns, of_jobsets)]

    def _delete_now(self, namespace: str, pod: str) -> None:
        """Delete ``pod`` with no grace period (a second delete may shorten the first's: the API server moves the
        pod's deletionTimestamp to now)."""
        with contextlib.suppress(ApiError):  # gone meanwhile
            self.api.request(
                "DELETE",
                f"/api/v1/namespaces/{namespace}/pods/{pod}",
                {"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 0},
            )

    def compact_etcd(self) -> int:
        """Compact etcd's history up to now, as the API server does every 5 minutes (--etcd-compaction-interval):
        a watch from a resourceVersion before it is answered 410 Gone, "too old resource version". The revision."""
        import urllib.request

        assert self.etcd_client is not None, "compact_etcd needs a plane this process started"
        context = self._client_context(self.etcd_client)

        def call(path: str, body: dict[str, Any]) -> dict[str, Any]:
            url = f"https://127.0.0.1:{self.etcd_port}{path}"
            request = urllib.request.Request(url, json.dumps(body).encode(), method="POST")
            with urllib.request.urlopen(request, timeout=10, context=context) as answer:
                parsed: dict[str, Any] = json.loads(answer.read())
                return parsed

        revision = int(call("/v3/kv/range", {"key": base64.b64encode(b"/").decode()})["header"]["revision"])
        call("/v3/kv/compaction", {"revision": revision, "physical": True})
        return revision

    def audit_lines(self) -> list[str]:
        """The API server's audit log: one JSON event per line for each request of the user alice (the
        namespace-scoped user), at its ResponseStarted (long-running requests: watches, log streams) and
        ResponseComplete stages, with its ``auditID``, ``verb``, ``requestURI``, ``userAgent`` and times."""
        return self.audit_log.read_text().splitlines() if self.audit_log.is_file() else []

    def _audit_policy(self) -> Path:
        """Metadata of every request of the namespace-scoped user, nothing of anyone else's (the controllers' and
        KWOK's thousands a minute): what tests and the scale benchmark count, as the server saw it."""
        policy = self.folder / "audit-policy.yaml"
        policy.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "audit.k8s.io/v1",
                    "kind": "Policy",
                    "omitStages": ["RequestReceived"],
                    "rules": [{"level": "Metadata", "users": [USER]}, {"level": "None"}],
                }
            )
        )
        return policy

    def stop(self) -> None:
        for process in reversed(self.processes):
            process.stop()
        self.processes.clear()

    def failure(self, what: str) -> str:
        return f"{what}; the control plane's logs: {self.logs}"

    # ------------------------------------------------------------------------------------------------- start-up

    def _process(self, name: str, argv: Sequence[str | Path], env: dict[str, str] | None = None) -> Process:
        process = Process(name, [str(a) for a in argv], self.logs / f"{name}.log").start(env)
        self.processes.append(process)
        return process

    def start(self) -> ControlPlane:
        began = time.monotonic()
        for source in (binaries.jobset_dir, binaries.kueue_dir, binaries.kwok_dir):
            source()  # the CRDs and webhook configurations: found (or downloaded) before anything starts
        certs = self.folder / "pki"
        ca = pki.new_authority(certs)
        self.ca = ca
        api_port = free_port()
        self.server = f"https://127.0.0.1:{api_port}"
        serving = ca.issue(
            "apiserver",
            "kube-apiserver",
            server=True,
            ips=("127.0.0.1", "10.96.0.1"),
            dns=("localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"),
        )
        admin = ca.issue("admin", "admin", groups=("system:masters",))
        self.admin_cert = admin
        local = ca.issue("loopback", "127.0.0.1", server=True, ips=("127.0.0.1",), dns=("localhost",))
        sa = pki.signing_key(certs)
        self.user_token = secrets.token_hex(16)
        tokens = self.folder / "tokens.csv"
        pki.private_file(tokens, f'{self.user_token},{USER},{USER},"team-members"\n'.encode())

        etcd = self._start_etcd(ca)
        etcd_client = ca.issue("apiserver-etcd-client", "kube-apiserver-etcd-client")
        self.etcd_client = etcd_client
        self._write_kubeconfig(self.admin_kubeconfig, {"client-certificate": admin.cert, "client-key": admin.key})
        apiserver = self._process(
            "kube-apiserver",
            [
                self.bin / "kube-apiserver",
                f"--etcd-servers=https://127.0.0.1:{etcd}",
                f"--etcd-cafile={ca.cert}",
                f"--etcd-certfile={etcd_client.cert}",
                f"--etcd-keyfile={etcd_client.key}",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                f"--secure-port={api_port}",
                f"--cert-dir={self.folder / 'apiserver'}",
                f"--tls-cert-file={serving.cert}",
                f"--tls-private-key-file={serving.key}",
                f"--client-ca-file={ca.cert}",
                f"--token-auth-file={tokens}",
                "--authorization-mode=RBAC",
                "--enable-admission-plugins=MutatingAdmissionWebhook,ValidatingAdmissionWebhook",
                "--service-account-issuer=https://kubernetes.default.svc",
                f"--service-account-key-file={sa.cert}",
                f"--service-account-signing-key-file={sa.key}",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                f"--kubelet-client-certificate={admin.cert}",
                f"--kubelet-client-key={admin.key}",
                "--kubelet-preferred-address-types=InternalIP",
                "--allow-privileged=true",
                "--profiling=false",
                "--endpoint-reconciler-type=none",
                f"--audit-policy-file={self._audit_policy()}",
                f"--audit-log-path={self.audit_log}",
                "--audit-log-format=json",
                "--audit-log-maxsize=512",
            ],
        )
        self.api = Api(self.server, self._client_context(admin))
        wait_until(apiserver, https_ok(f"{self.server}/readyz", self.api.context), 45, "ready (/readyz)")

        kcm_cert = ca.issue("kcm", "system:kube-controller-manager")
        kcm_config = self.folder / "kcm.kubeconfig"
        self._write_kubeconfig(kcm_config, {"client-certificate": kcm_cert.cert, "client-key": kcm_cert.key})
        sched_cert = ca.issue("scheduler", "system:kube-scheduler")
        sched_config = self.folder / "scheduler.kubeconfig"
        self._write_kubeconfig(sched_config, {"client-certificate": sched_cert.cert, "client-key": sched_cert.key})
        kcm_port, sched_port = free_port(), free_port()
        kcm = self._process(
            "kube-controller-manager",
            [
                self.bin / "kube-controller-manager",
                f"--kubeconfig={kcm_config}",
                f"--authentication-kubeconfig={kcm_config}",
                f"--authorization-kubeconfig={kcm_config}",
                "--bind-address=127.0.0.1",
                f"--secure-port={kcm_port}",
                "--leader-elect=false",
                f"--service-account-private-key-file={sa.key}",
                f"--root-ca-file={ca.cert}",
                "--use-service-account-credentials=true",
                "--controllers=*",
                f"--cert-dir={self.folder / 'kcm'}",
            ],
        )
        scheduler = self._process(
            "kube-scheduler",
            [
                self.bin / "kube-scheduler",
                f"--kubeconfig={sched_config}",
                f"--authentication-kubeconfig={sched_config}",
                f"--authorization-kubeconfig={sched_config}",
                "--bind-address=127.0.0.1",
                f"--secure-port={sched_port}",
                "--leader-elect=false",
                f"--cert-dir={self.folder / 'scheduler'}",
            ],
        )
        self._install_crds()
        for ns in (USER_NAMESPACE, "kueue-system"):
            self.api.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
        self._grant_user()

        webhook_certs = self.folder / "webhook-certs"
        webhook_certs.mkdir(mode=0o700)
        shutil.copy(local.cert, webhook_certs / "tls.crt")
        shutil.copy(local.key, webhook_certs / "tls.key")
        env = {**os.environ, "KUBECONFIG": str(self.admin_kubeconfig)}
        kwok_port = free_port()
        kwok_config = self.folder / "kwok.yaml"
        kwok_config.write_text(kwok.config())
        kwok_process = self._process(
            "kwok",
            [
                self.bin / "kwok",
                f"--config={kwok_config}",
                f"--kubeconfig={self.admin_kubeconfig}",
                "--manage-all-nodes=true",
                "--node-ip=127.0.0.1",
                f"--node-port={kwok_port}",
                f"--server-address=127.0.0.1:{kwok_port}",
                f"--tls-cert-file={local.cert}",
                f"--tls-private-key-file={local.key}",
                "--enable-crds=Logs,PortForward,ClusterLogs,ClusterPortForward",
            ],
            env,
        )
        # Both start at once (from this thread: a child dies with the thread that started it, PR_SET_PDEATHSIG).
        jobset_ready = self._start_jobset(webhook_certs, env)
        kueue_ready = self._start_kueue(webhook_certs, env)
        jobset_ready()
        kueue_ready()
        insecure = ssl.create_default_context()
        insecure.check_hostname, insecure.verify_mode = False, ssl.CERT_NONE
        wait_until(kcm, https_ok(f"https://127.0.0.1:{kcm_port}/healthz", insecure), 30, "healthy (/healthz)")
        wait_until(scheduler, https_ok(f"https://127.0.0.1:{sched_port}/healthz", insecure), 30, "healthy (/healthz)")
        wait_until(kwok_process, port_open(kwok_port), 30, "serving")
        # The controller manager's service-account controller makes each namespace's default account; pods need it.
        self.api.wait(f"/api/v1/namespaces/{USER_NAMESPACE}/serviceaccounts/default", bool, 30, "default account")
        self.api.wait("/api/v1/namespaces/default/serviceaccounts/default", bool, 30, "default account")
        self.started_in = time.monotonic() - began
        return self

    def _start_etcd(self, ca: pki.Authority) -> int:
        """etcd, reached over TLS by clients (and its one peer) with a certificate of the plane's CA only: on a
        plain http port of 127.0.0.1 every local user could read and write the cluster's state, RBAC aside."""
        client, peer = free_port(), free_port()
        serving = ca.issue("etcd", "etcd", server=True, client=True, ips=("127.0.0.1",), dns=("localhost",))
        self.etcd_port = client
        tls = [f"--cert-file={serving.cert}", f"--key-file={serving.key}", f"--trusted-ca-file={ca.cert}"]
        peer_tls = [f"--peer-cert-file={serving.cert}", f"--peer-key-file={serving.key}"]
        process = self._process(
            "etcd",
            [
                self.bin / "etcd",
                "--name=default",
                f"--data-dir={self.folder / 'etcd'}",
                f"--listen-client-urls=https://127.0.0.1:{client}",
                f"--advertise-client-urls=https://127.0.0.1:{client}",
                f"--listen-peer-urls=https://127.0.0.1:{peer}",
                f"--initial-advertise-peer-urls=https://127.0.0.1:{peer}",
                f"--initial-cluster=default=https://127.0.0.1:{peer}",
                *tls,
                "--client-cert-auth=true",
                *peer_tls,
                f"--peer-trusted-ca-file={ca.cert}",
                "--peer-client-cert-auth=true",
                "--unsafe-no-fsync=true",
                "--log-level=warn",
            ],
        )
        context = ssl.create_default_context(cafile=str(ca.cert))
        context.load_cert_chain(serving.cert, serving.key)
        wait_until(process, https_ok(f"https://127.0.0.1:{client}/health", context), 30, "healthy (/health)")
        return client

    def _client_context(self, pair: pki.Pair) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=str(self.ca.cert))
        context.load_cert_chain(pair.cert, pair.key)
        return context

    def _write_kubeconfig(self, path: Path, user: Mapping[str, Any], namespace: str | None = None) -> None:
        def data(p: Path) -> str:
            return base64.b64encode(p.read_bytes()).decode()

        entry: dict[str, str] = {}
        for key, value in user.items():
            entry[f"{key}-data" if isinstance(value, Path) else key] = data(value) if isinstance(value, Path) else value
        context: dict[str, str] = {"cluster": "control-plane", "user": "user"}
        if namespace:
            context["namespace"] = namespace
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "control-plane",
                    "cluster": {"server": self.server, "certificate-authority-data": data(self.ca.cert)},
                }
            ],
            "users": [{"name": "user", "user": entry}],
            "contexts": [{"name": "control-plane", "context": context}],
            "current-context": "control-plane",
        }
        pki.private_file(path, yaml.safe_dump(config).encode())  # it holds a client key or a token
        path.chmod(0o600)

    def _install_crds(self) -> None:
        files = sorted((binaries.jobset_dir() / "config/components/crd/bases").glob("*.yaml"))
        files += sorted((binaries.kueue_dir() / "config/components/crd/bases").glob("*.yaml"))
        kwok_crds = ("logs", "portforwards", "clusterlogs", "clusterportforwards")
        files += [binaries.kwok_dir() / f"kustomize/crd/bases/kwok.x-k8s.io_{name}.yaml" for name in kwok_crds]
        crds = [crd for file in files for crd in yaml.load_all(file.read_text(), Loader=FAST_YAML) if crd]
        with ThreadPoolExecutor(4) as pool:  # requests only: no process is started from these threads
            list(pool.map(self.api.apply, crds))
            waits = [
                pool.submit(self.api.wait, f"{CRDS}/{crd['metadata']['name']}", _established, 30, "CRD established")
                for crd in crds
            ]
            for wait in waits:
                wait.result()

    def _grant_user(self) -> None:
        """The namespace-scoped user: a Role with what preflight's permissions row checks, bound to USER."""
        rules = user_rules()
        meta = {"name": "pwdeploy-user", "namespace": USER_NAMESPACE}
        self.api.apply({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": meta, "rules": rules})
        self.api.apply(
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "RoleBinding",
                "metadata": meta,
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "pwdeploy-user"},
                "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": USER}],
            }
        )
        self._write_kubeconfig(self.user_kubeconfig, {"token": self.user_token}, namespace=USER_NAMESPACE)

    def _start_jobset(self, certs: Path, env: dict[str, str]) -> Callable[[], None]:
        port, health = free_port(), free_port()
        config = self.folder / "jobset.yaml"
        config.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "config.jobset.x-k8s.io/v1alpha1",
                    "kind": "Configuration",
                    "leaderElection": {"leaderElect": False},
                    "internalCertManagement": {"enable": False},
                    "webhook": {"host": "127.0.0.1", "port": port, "certDir": str(certs)},
                    "metrics": {"bindAddress": "0"},
                    "health": {"healthProbeBindAddress": f"127.0.0.1:{health}"},
                }
            )
        )
        version = binaries.versions()["JOBSET_VERSION"]
        process = self._process("jobset", [self.bin / f"jobset-{version}", f"--config={config}"], env)

        def ready() -> None:
            wait_until(process, _http_ok(f"http://127.0.0.1:{health}/readyz"), START_TIMEOUT, "ready (/readyz)")
            webhook = binaries.jobset_dir() / "config/components/webhook"
            self._register_webhooks("jobset", webhook / "manifests.yaml", port, _jobset_patches(webhook))

        return ready

    def _start_kueue(self, certs: Path, env: dict[str, str]) -> Callable[[], None]:
        port, health = free_port(), free_port()
        config = self.folder / "kueue.yaml"
        config.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "config.kueue.x-k8s.io/v1beta2",
                    "kind": "Configuration",
                    "namespace": "kueue-system",
                    "manageJobsWithoutQueueName": False,
                    "leaderElection": {"leaderElect": False},
                    "internalCertManagement": {"enable": False},
                    "webhook": {"host": "127.0.0.1", "port": port, "certDir": str(certs)},
                    "metrics": {"bindAddress": "0"},
                    "health": {"healthProbeBindAddress": f"127.0.0.1:{health}"},
                    "integrations": {"frameworks": ["batch/job", "jobset.x-k8s.io/jobset"]},
                    "featureGates": {"VisibilityOnDemand": False},
                    # Kueue v0.19 waits for pods to be Ready by default (30 min); here long enough for any job KWOK
                    # can run, short enough that a test sees PodsReadyTimeout and, the second time, deactivation.
                    "waitForPodsReady": {
                        "timeout": f"{KUEUE_PODS_READY_S}s",
                        "blockAdmission": False,
                        "requeuingStrategy": {
                            "timestamp": "Eviction",
                            "backoffLimitCount": 1,
                            "backoffBaseSeconds": 1,
                            "backoffMaxSeconds": 2,
                        },
                    },
                }
            )
        )
        _kueue_metrics_cert(certs)
        version = binaries.versions()["KUEUE_VERSION"]
        process = self._process("kueue", [self.bin / f"kueue-{version}", f"--config={config}"], env)
        served = {"kueue.x-k8s.io", "batch", "jobset.x-k8s.io"}  # its own kinds and the integrations enabled above

        def ready() -> None:
            wait_until(process, _http_ok(f"http://127.0.0.1:{health}/readyz"), START_TIMEOUT, "ready (/readyz)")
            manifests = binaries.kueue_dir() / "config/components/webhook/manifests.yaml"
            self._register_webhooks("kueue", manifests, port, functools.partial(_kueue_hook, served))

        return ready

    def _register_webhooks(self, owner: str, manifests: Path, port: int, adjust: HookPatch) -> None:
        """The component's webhook configurations, as its kustomization makes them (``adjust``: a hook as
        deployed, or None to leave it out), pointed at its server on 127.0.0.1 with the CA's bundle."""
        bundle = base64.b64encode(self.ca.cert.read_bytes()).decode()
        for doc in yaml.safe_load_all(manifests.read_text()):
            if not doc:
                continue
            hooks = []
            for index, original in enumerate(doc.get("webhooks", [])):
                hook = adjust(doc["kind"], index, original)
                if hook is None:
                    continue
                path = hook["clientConfig"]["service"]["path"]
                hook["clientConfig"] = {"url": f"https://127.0.0.1:{port}{path}", "caBundle": bundle}
                hooks.append(hook)
            doc["metadata"] = {"name": f"{owner}-{doc['metadata']['name']}"}
            doc["webhooks"] = hooks
            self.api.apply(doc)


HookPatch = Callable[[str, int, dict[str, Any]], dict[str, Any] | None]


def _jobset_patches(webhook: Path) -> HookPatch:
    """JobSet's config/components/webhook kustomization: patches/{mutating,validating}-patch.yaml replace the pod
    webhooks (index 1) with ones that carry an objectSelector (only pods of a JobSet)."""
    replaced: dict[tuple[str, int], dict[str, Any]] = {}
    for kind, file in (("MutatingWebhookConfiguration", "mutating"), ("ValidatingWebhookConfiguration", "validating")):
        for op in yaml.safe_load((webhook / "patches" / f"{file}-patch.yaml").read_text()) or []:
            if op.get("op") == "replace" and str(op.get("path", "")).startswith("/webhooks/"):
                replaced[(kind, int(op["path"].rsplit("/", 1)[1]))] = op["value"]

    def adjust(kind: str, index: int, hook: dict[str, Any]) -> dict[str, Any] | None:
        return dict(replaced.get((kind, index), hook))

    return adjust


KUEUE_SKIPS = {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["kube-system", "kueue-system"]}


def _kueue_hook(served: set[str], kind: str, index: int, hook: dict[str, Any]) -> dict[str, Any] | None:
    """Kueue's webhooks for its own kinds and the integrations it runs with (the others' paths are not served);
    its kustomization gives the integrations' webhooks a namespaceSelector that skips kube-system and
    kueue-system."""
    groups = {g for rule in hook.get("rules", []) for g in rule.get("apiGroups", [])}
    if not groups <= served:
        return None
    if groups != {"kueue.x-k8s.io"}:
        hook = {**hook, "namespaceSelector": {"matchExpressions": [KUEUE_SKIPS]}}
    return hook


KUEUE_METRICS_CERTS = Path("/etc/kueue/metrics/certs")


def _kueue_metrics_cert(certs: Path) -> None:
    """Kueue (cmd/kueue/main.go at v0.19.0) reads its metrics server's certificate from the fixed folder
    /etc/kueue/metrics/certs whenever internal cert management is off, even with metrics off, and exits without
    it. Any certificate does (the metrics server is not started): one is put there when the folder lacks it."""
    if (KUEUE_METRICS_CERTS / "tls.crt").is_file() and (KUEUE_METRICS_CERTS / "tls.key").is_file():
        return
    try:
        KUEUE_METRICS_CERTS.mkdir(parents=True, exist_ok=True)
        for name in ("tls.crt", "tls.key"):
            shutil.copy(certs / name, KUEUE_METRICS_CERTS / name)
    except OSError as e:
        raise StartError(
            f"Kueue needs a certificate in {KUEUE_METRICS_CERTS} (tls.crt, tls.key; any will do) and it cannot be "
            f"written here ({e}): sudo mkdir -p {KUEUE_METRICS_CERTS} && sudo cp {certs}/tls.* {KUEUE_METRICS_CERTS}/"
        ) from e


def user_rules() -> list[dict[str, list[str]]]:
    """The RBAC rules of the namespace-scoped user: what preflight's permissions row checks, no more."""
    from pwdeploy.readiness.permissions import NEEDED

    grouped: dict[tuple[str, str], list[str]] = {}
    for verb, resource in NEEDED:
        grouped.setdefault((resource.group, resource.rbac_resource), []).append(verb)
    return [{"apiGroups": [g], "resources": [r], "verbs": v} for (g, r), v in grouped.items()]


def _http_ok(url: str) -> Any:
    import urllib.request

    def probe() -> bool:
        try:
            with urllib.request.urlopen(url, timeout=2) as answer:
                return int(answer.status) == 200
        except OSError:
            return False

    return probe


def _ready(node: Mapping[str, Any]) -> bool:
    conditions = (node.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def _established(crd: Mapping[str, Any]) -> bool:
    conditions = (crd.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Established" and c.get("status") == "True" for c in conditions)


def attach(folder: Path, bin_dir: Path) -> ControlPlane:
    """The control plane ``scripts/control-plane.sh start`` (``python -m tests.control_plane run FOLDER``) keeps
    running in ``folder``: its API, kubeconfigs and audit log, for a benchmark run by hand against it. Its etcd
    is not known (``compact_etcd`` needs a plane this process started)."""
    plane = ControlPlane(folder, bin_dir)
    config = yaml.safe_load(plane.admin_kubeconfig.read_text())
    plane.server = str(config["clusters"][0]["cluster"]["server"])
    certs = folder / "pki"
    context = ssl.create_default_context(cafile=str(certs / "ca.crt"))
    context.load_cert_chain(certs / "admin.crt", certs / "admin.key")
    plane.api = Api(plane.server, context)
    return plane


def start(bin_dir: Path, folder: Path | None = None) -> ControlPlane:
    """Start every component; StartError (naming the component and its log) when one does not come up, after
    stopping what did."""
    plane = ControlPlane(folder or Path(tempfile.mkdtemp(prefix="pwdeploy-control-plane-")), bin_dir)
    try:
        return plane.start()
    except (StartError, ApiError, TimeoutError, OSError) as e:
        plane.stop()
        raise StartError(plane.failure(str(e))) from e
    except BaseException:
        plane.stop()
        raise
