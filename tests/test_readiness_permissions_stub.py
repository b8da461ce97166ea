"""The permissions row checks exactly what the commands use, and docs/cluster.md's Role is that: the commands run
against StubKubeApiServer (a loopback stub, not an API server), every request they send is turned into its RBAC
(verb, resource) and must be one the row checks; the Role in the docs grants exactly the row's table."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from pwdeploy.readiness.permissions import NEEDED, role_rules
from tests.conftest import REPO, ClusterCli
from tests.diagnose_cases import load, serve
from tests.kube_answers import Recorded
from tests.kube_stub import StubKubeApiServer

EXAMPLE = str(REPO / "examples" / "data_parallel" / "job.yaml")
_NAMESPACED = re.compile(r"^/(?:api/v1|apis/(?P<group>[^/]+)/[^/]+)/namespaces/[^/]+/(?P<rest>.+)$")


def rbac_of(request: Recorded) -> tuple[str, str, str] | None:
    """(verb, API group, resource[/subresource]) of a namespaced request, as the API server authorizes it."""
    found = _NAMESPACED.match(request.path)
    if found is None:
        return None  # discovery, /version, cluster-scoped reads: preflight's, not the commands'
    parts = found["rest"].split("/")
    resource = parts[0] + (f"/{parts[2]}" if len(parts) > 2 else "")
    named = len(parts) > 1
    verb = {
        "GET": "get" if named else "list",
        "PATCH": "patch",
        "DELETE": "delete",
        "POST": "create",
    }[request.method]
    return verb, found["group"] or "", resource


def granted() -> set[tuple[str, str, str]]:
    return {(verb, resource.group, resource.rbac_resource) for verb, resource in NEEDED}


def test_every_request_of_the_commands_is_one_the_permissions_row_checks_against_the_stub(
    stub: StubKubeApiServer, cluster_cli: ClusterCli, kc: list[str]
) -> None:
    submitted = cluster_cli(["submit", "-f", EXAMPLE, *kc, "--skip-preflight"])
    assert submitted.exit_code == 0, submitted.output
    stub.objects.clear()
    serve(stub, load("kueue-pending"), job="queued")  # a queued job: diagnose reads its Workload
    serve(stub, load("crash"))  # a failed container: diagnose and logs read its log
    commands = [
        ["status", "dp-example"],
        ["list"],
        ["logs", "dp-example"],
        ["diagnose", "dp-example"],
        ["diagnose", "queued"],
        ["delete", "dp-example", "--yes", "--wait"],
    ]
    for args in commands:
        result = cluster_cli([*args, *kc])
        assert result.exit_code in (0, 10), (args, result.output)  # 10: diagnose found an error
    used = {rbac for r in stub.requests if (rbac := rbac_of(r)) is not None}
    assert used <= granted(), used - granted()
    # the test saw what it claims to: each kind of request the commands above make
    assert {("patch", "jobset.x-k8s.io", "jobsets"), ("list", "batch", "jobs"), ("get", "", "pods/log")} <= used
    assert {("list", "kueue.x-k8s.io", "workloads"), ("delete", "jobset.x-k8s.io", "jobsets")} <= used


def test_the_role_in_the_docs_grants_exactly_what_the_row_checks() -> None:
    text = (Path(REPO) / "docs" / "cluster.md").read_text(encoding="utf-8")
    block = text.split("<!-- generated: rbac-role -->\n", 1)[1].split("<!-- end generated", 1)[0]
    role = yaml.safe_load(block.strip().removeprefix("```yaml").removesuffix("```"))
    assert role["kind"] == "Role"
    in_docs = {
        (verb, group, resource)
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }
    assert in_docs == granted()
    assert role["rules"] == role_rules()


def test_drill_and_connect_verbs_are_checked() -> None:
    """drill deletes or evicts pods and signals a container through exec; connect and profile forward a port;
    both streams are WebSocket upgrades (GETs), authorized as get and, from Kubernetes 1.35, create."""
    assert {("delete", "", "pods"), ("create", "", "pods/eviction")} <= granted()
    for stream in ("pods/exec", "pods/portforward"):
        assert {("get", "", stream), ("create", "", stream)} <= granted()
