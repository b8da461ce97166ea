"""The API stub held to the real API server: the same requests, sent to both with the same objects in place, get
answers of the same shape. Where the real control plane can serve a request, the stub (tests/kube_stub.py) may leave
fields out but never invent one: every key it answers is one the real server answers too, with a value of the same
JSON type; kinds, API versions, status codes and the reasons, codes and messages of ``Status`` errors are the real
ones exactly (a message both give with a name of its own is compared with the names in place).

What the real server cannot give on demand (throttling, 5xx, stalls, hostile answers, old versions) stays with the
stub alone; so do its answers about what it does not run (a watch, a kubelet's log stream)."""

from __future__ import annotations

import contextlib
import copy
import http.client
import json
import re
import ssl
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from tests.control_plane import ControlPlane
from tests.kube_answers import ACCESS_REVIEW_PATH, APPLY_PATCH, JOBSET_CRD_PATH, JOBSET_GV
from tests.kube_objects import rendered_jobset
from tests.kube_stub import StubKubeApiServer

pytestmark = [pytest.mark.control_plane, pytest.mark.timeout(300)]

NS = "shapes"
JOBSETS = f"/apis/{JOBSET_GV}/namespaces/{NS}/jobsets"
PODS = f"/api/v1/namespaces/{NS}/pods"
PARTIAL = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1"
SELECTOR = urllib.parse.urlencode({"labelSelector": "app=shapes", "limit": "1"})


@dataclass(frozen=True)
class Answer:
    code: int
    json: bool
    body: Any


@dataclass
class Asker:
    """Raw requests to one server as one user: the answer as it came (JSON parsed), nothing interpreted."""

    server: str
    context: ssl.SSLContext
    token: str | None = None
    headers: dict[str, str] = field(default_factory=dict)

    def __call__(
        self, method: str, path: str, body: Any = None, *, content_type: str = "application/json", accept: str = ""
    ) -> Answer:
        url = urllib.parse.urlsplit(self.server)
        connection = http.client.HTTPSConnection(url.hostname or "", url.port, context=self.context, timeout=30)
        headers = {"Accept": accept or "application/json", **self.headers}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        data = json.dumps(body).encode() if body is not None else None
        if data is not None:
            headers["Content-Type"] = content_type
        try:
            connection.request(method, path, data, headers)
            answer = connection.getresponse()
            raw = answer.read()
            is_json = (answer.getheader("Content-Type") or "").startswith("application/json")
            return Answer(answer.status, is_json, json.loads(raw) if is_json and raw else raw.decode(errors="replace"))
        finally:
            connection.close()


@dataclass
class Pair:
    """The stub and the real API server, each with an admin and the namespace-scoped user alice."""

    stub: StubKubeApiServer
    real_admin: Asker
    real_alice: Asker
    stub_admin: Asker
    stub_alice: Asker

    def both(self, *, alice: bool = False) -> tuple[Asker, Asker]:
        return (self.stub_alice, self.real_alice) if alice else (self.stub_admin, self.real_admin)


def conform(stub: Any, real: Any, at: str = "") -> list[str]:
    """How ``stub`` is not a shape of ``real``: a key ``real`` lacks, a value of another JSON type, another kind or
    API version. Lists of named things are matched by name; other lists item by item against ``real``'s first."""
    if isinstance(stub, dict) and isinstance(real, dict):
        return _conform_objects(stub, real, at)
    if isinstance(stub, list) and isinstance(real, list):
        return _conform_lists(stub, real, at)
    if _json_type(stub) != _json_type(real):
        return [f"{at or '.'}: the stub answers {_json_type(stub)} {stub!r:.60}, the server {_json_type(real)}"]
    return []


def _conform_objects(stub: dict[str, Any], real: dict[str, Any], at: str) -> list[str]:
    found = [f"{at}.{key}: the stub answers it, the server does not" for key in stub if key not in real]
    found += [
        f"{at}.{key}: the stub answers {stub[key]!r}, the server {real[key]!r}"
        for key in ("kind", "apiVersion")
        if isinstance(stub.get(key), str) and isinstance(real.get(key), str) and stub[key] != real[key]
    ]
    return found + [problem for key in stub if key in real for problem in conform(stub[key], real[key], f"{at}.{key}")]


def _conform_lists(stub: list[Any], real: list[Any], at: str) -> list[str]:
    if not stub or not real:
        return []
    by_name = {_name(item): item for item in real}
    found = []
    for index, item in enumerate(stub):
        name = _name(item)
        if name is not None and name not in by_name:
            found.append(f"{at}[{name}]: the stub lists it, the server does not")
            continue
        counterpart = by_name.get(name) if name is not None else real[min(index, len(real) - 1)]
        found += conform(item, counterpart, f"{at}[{name if name is not None else index}]")
    return found


def _name(item: Any) -> str | None:
    if not isinstance(item, dict):
        return None
    name = item.get("name") or (item.get("metadata") or {}).get("name")
    return str(name) if isinstance(name, str) else None


def _json_type(value: Any) -> str:
    kinds = ((bool, "boolean"), ((int, float), "number"), (str, "string"), (list, "array"), (dict, "object"))
    return next((name for kinds_of, name in kinds if isinstance(value, kinds_of)), "null")


def differences(stub: Answer, real: Answer) -> list[str]:
    """Everything that keeps the stub's answer from being a shape of the real one."""
    if (stub.code, stub.json) != (real.code, real.json):
        return [f"the stub answers {stub.code} (JSON: {stub.json}), the server {real.code} (JSON: {real.json})"]
    if not stub.json:
        return [] if stub.body == real.body else [f"the stub says {stub.body!r:.200}, the server {real.body!r:.200}"]
    found = conform(stub.body, real.body)
    if isinstance(stub.body, dict) and stub.body.get("kind") == "Status":
        for key in STATUS_KEYS:
            ours, theirs = _words(stub.body.get(key)), _words(real.body.get(key))
            found += [f"Status.{key}: the stub says {ours!r}, the server {theirs!r}"] if ours != theirs else []
    return found


STATUS_KEYS = ("status", "reason", "code", "message")
# A value a message quotes in full (a webhook's "Invalid value: <the new field as JSON>"): the server writes it in Go's
# field order, the stub in its own; the words around it are compared.
QUOTED_VALUE = re.compile(r"Invalid value: .*: ")


def _words(value: Any) -> Any:
    return QUOTED_VALUE.sub("Invalid value: VALUE: ", value) if isinstance(value, str) else value


def ask_both(pair: Pair, method: str, path: str, body: Any = None, *, alice: bool = False, **how: str) -> list[str]:
    """What differs between the stub's answer and the real server's to the same request."""
    stub, real = pair.both(alice=alice)
    answers = stub(method, path, body, **how), real(method, path, body, **how)
    return [f"{method} {path}: {problem}" for problem in differences(*answers)]


def same(found: list[str]) -> None:
    assert not found, "the stub's answers are not shapes of the server's:\n" + "\n".join(found)


# ------------------------------------------------------------------------------------------ set-up


def _pod(name: str) -> dict[str, Any]:
    """A pod that stays Pending (it selects no node), so nothing but the API server acts on it."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NS, "labels": {"app": "shapes"}},
        "spec": {"containers": [{"name": "main", "image": "registry.example/x:1"}], "nodeSelector": {"shapes": "none"}},
    }


SECRET = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "shape-secret", "namespace": NS}, "data": {}}


@pytest.fixture(scope="module")
def pair(control_plane: ControlPlane) -> Iterator[Pair]:
    plane = control_plane
    plane.api.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    for name in ("shape-a", "shape-b"):
        plane.api.request("POST", PODS, _pod(name))
    plane.api.request("POST", f"/api/v1/namespaces/{NS}/secrets", SECRET)
    alice_context = ssl.create_default_context(cafile=str(plane.ca.cert))
    with StubKubeApiServer(tokens={"admin-token": "admin", "alice-token": "alice"}, namespaces=(NS,)) as stub:
        for name in ("shape-a", "shape-b"):
            stub.put("pods", copy.deepcopy(_pod(name)))
        stub.put("secrets", copy.deepcopy(SECRET))
        stub_context = ssl.create_default_context(cadata=(stub.ca_pem or b"").decode())
        yield Pair(
            stub,
            Asker(plane.server, plane.api.context),
            Asker(plane.server, alice_context, plane.user_token),
            Asker(stub.url, stub_context, "admin-token"),
            Asker(stub.url, stub_context, "alice-token"),
        )
    with contextlib.suppress(Exception):
        plane.api.request("DELETE", f"/api/v1/namespaces/{NS}", {"propagationPolicy": "Background"})


# ------------------------------------------------------------------------------------------ the requests


READS = [
    ("the version", "/version", ""),
    ("discovery of the groups", "/apis", ""),
    ("JobSet's resources", f"/apis/{JOBSET_GV}", ""),
    ("a namespace", f"/api/v1/namespaces/{NS}", ""),
    ("a namespace that does not exist", "/api/v1/namespaces/no-such-namespace", ""),
    ("the JobSet CRD", JOBSET_CRD_PATH, ""),
    ("a page of a label-selected pod list", f"{PODS}?{SELECTOR}", ""),
    ("a pod", f"{PODS}/shape-a", ""),
    ("a pod that does not exist", f"{PODS}/no-such-pod", ""),
    ("the log of a container the pod does not have", f"{PODS}/shape-a/log?container=nope", ""),
    ("the log of a pod that does not exist", f"{PODS}/no-such-pod/log?container=main", ""),
    ("a Secret's metadata", f"/api/v1/namespaces/{NS}/secrets/shape-secret", PARTIAL),
    ("a Secret that does not exist", f"/api/v1/namespaces/{NS}/secrets/no-such-secret", PARTIAL),
    ("a JobSet that does not exist", f"{JOBSETS}/no-such-jobset", ""),
]


@pytest.mark.parametrize(("what", "path", "accept"), READS, ids=[r[0] for r in READS])
def test_a_read_is_answered_in_the_servers_shape(pair: Pair, what: str, path: str, accept: str) -> None:
    same(ask_both(pair, "GET", path, accept=accept))


@pytest.mark.parametrize("query", [SELECTOR, "limit=1"], ids=["selected", "unselected"])
def test_a_list_is_paged_as_the_server_pages_it(pair: Pair, query: str) -> None:
    """A page, then the next one by its continue token; the count left is known only when nothing is selected."""
    askers = pair.both()
    first = [ask("GET", f"{PODS}?{query}") for ask in askers]
    same(differences(*first))
    counts = [answer.body["metadata"].get("remainingItemCount") for answer in first]
    assert counts == ([None, None] if "labelSelector" in query else [1, 1])
    tokens = [urllib.parse.quote(answer.body["metadata"]["continue"]) for answer in first]
    pages = [ask("GET", f"{PODS}?{query}&continue={token}") for ask, token in zip(askers, tokens, strict=True)]
    same(differences(*pages))
    assert [len(p.body["items"]) for p in pages] == [1, 1]


def test_an_access_review_is_answered_in_the_servers_shape(pair: Pair) -> None:
    review = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SelfSubjectAccessReview",
        "spec": {"resourceAttributes": {"namespace": NS, "verb": "list", "resource": "pods"}},
    }
    same(ask_both(pair, "POST", ACCESS_REVIEW_PATH, review))


FORBIDDEN = [
    ("the nodes", "/api/v1/nodes", ("list", "nodes")),
    ("another namespace's JobSets", JOBSETS, ("list", "jobsets")),
    ("another namespace's pod", f"{PODS}/shape-a", ("get", "pods")),
]


@pytest.mark.parametrize(("what", "path", "rule"), FORBIDDEN, ids=[f[0] for f in FORBIDDEN])
def test_what_alice_may_not_read_is_refused_in_the_servers_words(
    pair: Pair, what: str, path: str, rule: tuple[str, str]
) -> None:
    """alice holds a Role in her own namespace only (tests/control_plane: preflight's permissions, no more)."""
    pair.stub.forbid(*rule)
    try:
        same(ask_both(pair, "GET", path, alice=True))
    finally:
        pair.stub.forbidden.clear()


def test_a_request_without_credentials_is_refused_in_the_servers_words(pair: Pair) -> None:
    """No token and no client certificate: the server's anonymous user, which may do nothing."""
    pair.stub.anonymous = "system:anonymous"
    pair.stub.forbid("get", "namespaces")
    nobody = [Asker(asker.server, asker.context) for asker in pair.both(alice=True)]
    try:
        same(differences(*(ask("GET", f"/api/v1/namespaces/{NS}") for ask in nobody)))
    finally:
        pair.stub.anonymous = None
        pair.stub.forbidden.clear()


def test_a_jobsets_life_is_answered_in_the_servers_shape(pair: Pair, control_plane: ControlPlane) -> None:
    """Server-side apply (a dry run, then for real, again unchanged, then with its spec changed), a create of a
    name that is taken, an apply without a field manager, a read and a delete: each step on both."""
    job = rendered_jobset("shape-js", NS)
    path, json_body = f"{JOBSETS}/shape-js", "application/json"
    changed = copy.deepcopy(job)
    changed["spec"]["replicatedJobs"][1]["replicas"] = 1
    steps = [
        ("PATCH", f"{path}?fieldManager=pwdeploy&dryRun=All", job, APPLY_PATCH),
        ("PATCH", f"{path}?fieldManager=pwdeploy", job, APPLY_PATCH),
        ("PATCH", f"{path}?fieldManager=pwdeploy", job, APPLY_PATCH),
        ("PATCH", path, job, APPLY_PATCH),
        ("PATCH", f"{path}?fieldManager=pwdeploy", changed, APPLY_PATCH),
        ("POST", JOBSETS, job, json_body),
        ("GET", path, None, json_body),
        ("DELETE", f"{path}?dryRun=All", None, json_body),
        ("DELETE", path, None, json_body),
        ("GET", path, None, json_body),
    ]
    try:
        said = [
            problem
            for method, where, body, content_type in steps
            for problem in ask_both(pair, method, where, body, content_type=content_type)
        ]
    finally:
        control_plane.clear_jobs(NS)
    same(said)
