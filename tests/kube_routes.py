"""Which paths the API stub serves, and what it tells of itself: discovery, ``/version``, the API groups installed
(JobSet, Kueue at one version, ProvisioningRequests when set), the JobSet CRD, and for each resource path the store
call that answers it (tests/kube_store.py). A path it does not serve is the API server's 404."""

from __future__ import annotations

import re
from typing import Any, NoReturn

from tests.crd import crd_object
from tests.kube_answers import (
    ACCESS_REVIEW_PATH,
    JOBSET_CRD_PATH,
    JOBSET_GV,
    Recorded,
    Reply,
    no_resource,
    not_found,
)
from tests.kube_discovery import discovery
from tests.kube_store import ObjectStore

JOBSET_RESOURCES = {
    "kind": "APIResourceList",
    "apiVersion": "v1",
    "groupVersion": JOBSET_GV,
    "resources": [
        {
            "name": "jobsets",
            "singularName": "jobset",
            "namespaced": True,
            "kind": "JobSet",
            "verbs": ["delete", "get", "list", "patch", "create", "update", "watch"],
        }
    ],
}
# Namespaced objects tests put() and the stub only reads: path pattern -> (plural, group, version).
READ_ONLY = (
    (r"/apis/apps/v1/namespaces/([^/]+)/deployments/([^/]+)", ("deployments", "apps", "v1")),  # the controllers'
    (r"/api/v1/namespaces/([^/]+)/configmaps/([^/]+)", ("configmaps", "", "v1")),  # Kueue's Configuration
    (r"/api/v1/namespaces/([^/]+)/pods/([^/]+)", ("pods", "", "v1")),  # kubectl port-forward reads the pod first
)


class KubeApi(ObjectStore):
    def __init__(
        self,
        *,
        tokens: dict[str, str] | None,
        namespaces: tuple[str, ...],
        jobset_installed: bool,
        kueue_version: str | None,
        provisioning_version: str | None,
    ) -> None:
        super().__init__(tokens=tokens, namespaces=namespaces)
        self.jobset_installed = jobset_installed
        self.kueue_version = kueue_version
        self.provisioning_version = provisioning_version  # autoscaling.x-k8s.io (ProvisioningRequest) when set
        self.version = {"major": "1", "minor": "31+", "gitVersion": "v1.31.4-gke.1256000"}
        self.crd_version = "0.10.1"  # the vendored JobSet CRD served (tests/fixtures/crds)
        self.jobset_crd: dict[str, Any] | None = None  # a CRD object that replaces the real one

    def _netloc(self) -> str:
        """host:port of the server, as discovery names it (the server's to say)."""
        raise NotImplementedError

    def _dispatch(self, r: Recorded) -> None:
        path = r.path.rstrip("/")
        if r.method == "GET":
            self._about(path)
        self._own_reads(r, path)
        self._groups(path)
        self._core(r, path)
        self._custom(r, path)
        self._dispatch_lists(r, path)
        raise no_resource()

    def _about(self, path: str) -> None:
        """Discovery and the version."""
        if path.count("/") <= 3:
            jobset_gv = JOBSET_GV if self.jobset_installed else None
            document = discovery(path, jobset_gv=jobset_gv, server_address=self._netloc())
            if document is not None:
                raise Reply(200, document)
        if path == "/version":
            raise Reply(200, self.version)

    def _own_reads(self, r: Recorded, path: str) -> None:
        """The JobSet CRD, access reviews, nodes and Secrets' metadata."""
        if path == JOBSET_CRD_PATH and r.method == "GET":
            self._jobset_crd(r)
        if path == ACCESS_REVIEW_PATH and r.method == "POST":
            self._access_review(r)
        if path == "/api/v1/nodes" and r.method == "GET":
            self._list(r, "nodes", "", "v1", None)
        m = re.fullmatch(r"/api/v1/namespaces/([^/]+)/secrets/([^/]+)", path)
        if m and r.method == "GET":
            self._secret_metadata(r, m[1], m[2])

    def _groups(self, path: str) -> None:
        """The JobSet and Kueue groups: served, or 404 when not installed."""
        if path == f"/apis/{JOBSET_GV}":
            if not self.jobset_installed:
                raise no_resource()
            raise Reply(200, JOBSET_RESOURCES)
        if path == "/apis/kueue.x-k8s.io":
            self._group("kueue.x-k8s.io", self.kueue_version)

    @staticmethod
    def _group(name: str, version: str | None) -> NoReturn:
        if version is None:
            raise no_resource()
        gv = {"groupVersion": f"{name}/{version}", "version": version}
        raise Reply(
            200, {"kind": "APIGroup", "apiVersion": "v1", "name": name, "versions": [gv], "preferredVersion": gv}
        )

    def _core(self, r: Recorded, path: str) -> None:
        """Namespaces, pods and their logs, events, and the objects tests put() for the stub to read."""
        m = re.fullmatch(r"/api/v1/namespaces/([^/]+)", path)
        if m and r.method == "GET":
            self._check_rbac(r, "get", "namespaces", "", m[1], m[1])  # the server scopes it to the namespace
            if m[1] not in self.namespaces:
                raise not_found("namespaces", "", m[1])
            raise Reply(200, {"kind": "Namespace", "apiVersion": "v1", "metadata": {"name": m[1]}})
        m = re.fullmatch(r"/api/v1/namespaces/([^/]+)/pods/([^/]+)/log", path)
        if m:
            self._pod_log(r, m[1], m[2])
        for pattern, (plural, group, version) in READ_ONLY:
            m = re.fullmatch(pattern, path)
            if m and r.method == "GET":
                self._resource(r, plural, group, version, m[1], m[2])
        m = re.fullmatch(r"/api/v1/namespaces/([^/]+)/(pods|events)", path)
        if m and r.method == "GET":
            self._list(r, m[2], "", "v1", m[1])

    def _custom(self, r: Recorded, path: str) -> None:
        """JobSets, and Kueue's objects at the version it serves."""
        m = re.fullmatch(r"/apis/jobset\.x-k8s\.io/v1alpha2(?:/namespaces/([^/]+))?/jobsets(?:/([^/]+))?", path)
        if m:
            if not self.jobset_installed:
                raise no_resource()
            self._resource(r, "jobsets", "jobset.x-k8s.io", "v1alpha2", m[1], m[2])
        m = re.fullmatch(r"/apis/kueue\.x-k8s\.io/([^/]+)/namespaces/([^/]+)/localqueues(?:/([^/]+))?", path)
        if m and self.kueue_version == m[1]:
            self._resource(r, "localqueues", "kueue.x-k8s.io", m[1], m[2], m[3])
        m = re.fullmatch(
            r"/apis/kueue\.x-k8s\.io/([^/]+)/(clusterqueues|admissionchecks|provisioningrequestconfigs)/([^/]+)", path
        )
        if m and self.kueue_version == m[1] and r.method == "GET":  # cluster-scoped: put() them with namespace ""
            self._resource(r, m[2], "kueue.x-k8s.io", m[1], "", m[3])
        m = re.fullmatch(r"/apis/kueue\.x-k8s\.io/([^/]+)/(topologies|admissionchecks)", path)
        if m and self.kueue_version == m[1] and r.method == "GET":  # cluster-scoped lists
            self._list(r, m[2], "kueue.x-k8s.io", m[1], "")

    def _dispatch_lists(self, r: Recorded, path: str) -> None:
        """Lists of Jobs, Kueue Workloads and ProvisioningRequests (and the autoscaling.x-k8s.io group) that
        diagnose reads; objects are added with ``put("jobs" | "workloads" | "provisioningrequests", obj)``."""
        if r.method != "GET":
            return
        m = re.fullmatch(r"/apis/batch/v1/namespaces/([^/]+)/jobs", path)
        if m:
            self._list(r, "jobs", "batch", "v1", m[1])
        if path == "/api/v1/pods":  # every namespace's pods (preflight counts what they hold on the nodes)
            self._list(r, "pods", "", "v1", None)
        m = re.fullmatch(r"/apis/kueue\.x-k8s\.io/([^/]+)/namespaces/([^/]+)/workloads", path)
        if m and self.kueue_version == m[1]:
            self._list(r, "workloads", "kueue.x-k8s.io", m[1], m[2])
        group = "autoscaling.x-k8s.io"
        if path == f"/apis/{group}":
            self._group(group, self.provisioning_version)
        m = re.fullmatch(r"/apis/autoscaling\.x-k8s\.io/([^/]+)/namespaces/([^/]+)/provisioningrequests", path)
        if m and self.provisioning_version == m[1]:
            self._list(r, "provisioningrequests", group, m[1], m[2])

    def _jobset_crd(self, r: Recorded) -> NoReturn:
        name = "jobsets.jobset.x-k8s.io"
        self._check_rbac(r, "get", "customresourcedefinitions", "apiextensions.k8s.io", None, name)
        if not self.jobset_installed:
            raise not_found("customresourcedefinitions", "apiextensions.k8s.io", name)
        raise Reply(200, self.jobset_crd if self.jobset_crd is not None else crd_object(self.crd_version))
