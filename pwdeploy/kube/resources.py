"""The Kubernetes resources pwdeploy talks to, and what a request is for in RBAC terms (``Action``), so that every
message can name the resource and the permission."""

from __future__ import annotations

from typing import NamedTuple


class Resource(NamedTuple):
    """A Kubernetes resource type: where it lives in the API and how to name it to users."""

    group: str  # "" for the core group
    version: str
    plural: str
    kind: str
    namespaced: bool = True
    subresource: str = ""  # "log", "portforward": a request to one object's subresource

    @property
    def rbac_resource(self) -> str:
        """``pods/log`` for a subresource, else the plural: the ``resources`` entry of an RBAC rule."""
        return f"{self.plural}/{self.subresource}" if self.subresource else self.plural

    @property
    def group_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def api_path(self) -> str:
        return f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"

    @property
    def display(self) -> str:
        """``jobsets.jobset.x-k8s.io`` or ``pods``, as ``kubectl auth can-i`` spells it."""
        return f"{self.rbac_resource}.{self.group}" if self.group else self.rbac_resource

    def path(self, namespace: str | None = None, name: str | None = None) -> str:
        """The URL path of the collection, of the object ``name``, or of that object's subresource."""
        parts = [self.api_path]
        if self.namespaced and namespace is not None:
            parts += ["namespaces", namespace]
        parts.append(self.plural)
        if name is not None:
            parts.append(name)
            if self.subresource:
                parts.append(self.subresource)
        return "/".join(parts)


JOBSETS = Resource("jobset.x-k8s.io", "v1alpha2", "jobsets", "JobSet")
PODS = Resource("", "v1", "pods", "Pod")
JOBS = Resource("batch", "v1", "jobs", "Job")
EVENTS = Resource("", "v1", "events", "Event")
NAMESPACES = Resource("", "v1", "namespaces", "Namespace", namespaced=False)
NODES = Resource("", "v1", "nodes", "Node", namespaced=False)
SECRETS = Resource("", "v1", "secrets", "Secret")
POD_LOGS = Resource("", "v1", "pods", "Pod", subresource="log")
POD_PORTFORWARD = Resource("", "v1", "pods", "Pod", subresource="portforward")
CRDS = Resource("apiextensions.k8s.io", "v1", "customresourcedefinitions", "CustomResourceDefinition", namespaced=False)
ACCESS_REVIEWS = Resource(
    "authorization.k8s.io", "v1", "selfsubjectaccessreviews", "SelfSubjectAccessReview", namespaced=False
)


def localqueues(version: str) -> Resource:
    return Resource("kueue.x-k8s.io", version, "localqueues", "LocalQueue")


class Action(NamedTuple):
    """What a request was for, in RBAC terms, so errors can say which permission is missing."""

    verb: str  # get, list, create, patch, delete, ...
    resource: Resource | None  # None for discovery
    namespace: str | None = None
    name: str | None = None

    def describe(self) -> str:
        if self.resource is None:
            return f"{self.verb} the API discovery document {self.name or ''}".rstrip()
        target = f"{self.resource.display} {self.name!r}" if self.name else self.resource.display
        where = f" in namespace {self.namespace!r}" if self.namespace and self.resource.namespaced else ""
        return f"{self.verb} {target}{where}"
