"""A real Kubernetes control plane for the tests, started from the binaries scripts/control-plane.sh builds.

What runs (every process on 127.0.0.1, free ports, its log in ``plane.logs``, named in every start failure):
etcd; kube-apiserver with TLS from a throwaway CA, client-certificate and static-token authentication, RBAC, and
the admission webhooks; kube-controller-manager (every default controller: job, garbage collector, namespace,
service account, token, pod GC, ...); kube-scheduler; the JobSet manager and Kueue, each with its CRDs and its
webhook configurations (from the same module version, pointed at ``https://127.0.0.1:PORT`` with the CA's
bundle), so the API server really calls them over TLS; KWOK, which plays the kubelet of every Node the tests
create (its Stages: tests/control_plane/kwok.py).

For tests: the session fixture ``control_plane`` (tests/conftest.py; marker ``control_plane``) gives a
``ControlPlane``:

- ``plane.admin_kubeconfig`` (client certificate, ``system:masters``) and ``plane.user_kubeconfig`` (the token
  user ``alice``, namespace ``plane.user_namespace``, holding exactly what preflight's permissions row checks:
  pwdeploy.readiness.permissions.NEEDED); ``plane.env(user=...)`` is an environment with KUBECONFIG set,
  ``plane.kubectl(*args, user=...)`` runs kubectl with it.
- ``plane.node_pools(NodePool("cpu", nodes=1, cpu="16"), NodePool("tpu", nodes=2, tpu=TpuPool("tpu-v5p-slice",
  "2x2x2", 4)))``: a ``with`` that creates the nodes (GKE's labels ``cloud.google.com/gke-nodepool``,
  ``gke-tpu-accelerator``, ``gke-tpu-topology``, ``google.com/tpu`` capacity, the ``google.com/tpu=present:
  NoSchedule`` taint), waits until they are Ready and deletes them after (``add_node_pool``/``remove_node_pool``
  without the ``with``).
- ``plane.exit_pod(ns, pod, code, container=None)``: the running pod's containers end with ``code`` (only
  ``container``'s when named, the others with 0), as a kubelet reports it (phase Failed, or Succeeded for 0).
- ``plane.restart_container(ns, pod, container, code)``: for a ``restartPolicy: OnFailure`` pod (a worker), the
  container exited with ``code`` and the kubelet started it again (restartCount + 1), as the Job controller
  counts it against ``backoffLimit``.
- ``plane.write_pod_log(ns, pod, lines, container=None, append=False)``: what the pod's logs serve (``append``:
  more lines for a follow).
- ``plane.forward_port(ns, pod, port, to_port)``: a port-forward to the pod's ``port`` reaches 127.0.0.1:to_port.
- ``plane.evict(ns, pod)`` (the Eviction API: DisruptionTarget, then deleted), ``plane.pods(ns, selector)``,
  ``plane.api`` (the admin's JSON client for anything else).
- ``plane.audit_lines()``: the API server's audit log of every request of alice (verb, URI, User-Agent);
  ``plane.compact_etcd()``: etcd's history compacted, as the API server does every 5 minutes (a watch from before
  it gets 410); ``tests/control_plane/scale.py``: a job of N slices of v5p-32 and what commands cost on it.

For people: ``scripts/control-plane.sh start`` starts one and prints its KUBECONFIG; ``stop`` stops it;
``cluster.attach(FOLDER, bin_dir)`` is a ``ControlPlane`` of the one running there (a benchmark run by hand).
"""

from tests.control_plane.cluster import ControlPlane, NodePool, TpuPool, start

__all__ = ["ControlPlane", "NodePool", "TpuPool", "start"]
