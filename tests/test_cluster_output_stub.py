"""kubectl's conventions on the inspection commands, against StubKubeApiServer (a loopback stub, not an API
server): `status` and `list` as `-o json` / `-o yaml` documents (read as data, in the shapes docs/output.md
gives), PWDEPLOY_NAMESPACE read by every command with -n, and a question without a terminal."""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml

from tests.conftest import ClusterCli
from tests.diagnose_cases import load, serve
from tests.kube_stub import StubKubeApiServer
from tests.test_cluster_lifecycle import jobset


def documents(cluster_cli: ClusterCli, args: list[str]) -> dict[str, Any]:
    as_json = cluster_cli([*args, "-o", "json"])
    as_yaml = cluster_cli([*args, "-o", "yaml"])
    assert as_json.exit_code == 0 and as_yaml.exit_code == 0, as_json.output + as_yaml.output
    document: dict[str, Any] = json.loads(as_json.stdout)
    assert yaml.safe_load(as_yaml.stdout) == document
    return document


def test_status_as_a_document_against_the_stub(stub: StubKubeApiServer, cluster_cli: ClusterCli, kc: list[str]) -> None:
    serve(stub, load("tpu-capacity"))
    document = documents(cluster_cli, ["status", "dp-example", *kc])
    assert list(document) == [
        "job", "namespace", "created", "state", "groups", "conditions", "pods", "warning_events", "findings",
        "slices", "notes",
    ]  # fmt: skip
    assert document["job"] == "dp-example" and document["namespace"] == "default"
    assert set(document["state"]) == {"phase", "reason", "message", "restarts"}
    assert document["groups"][0] == {
        "label": "head", "expected": 1, "scheduled": 1, "running": 1, "succeeded": 0, "failed": 0
    }  # fmt: skip
    assert {tuple(pod) for pod in document["pods"]} == {("component", "pod", "state", "ready", "restarts")}
    assert document["findings"][0]["cause"] == "tpu-capacity"
    assert all(set(e) == {"object", "reason", "message"} for e in document["warning_events"])
    assert document["slices"] is None and document["notes"] == []  # its resource manager does not run


def test_status_yaml_escapes_what_json_escapes_against_the_stub(
    stub: StubKubeApiServer, cluster_cli: ClusterCli, kc: list[str]
) -> None:
    fixture = load("crash")
    fixture["pods"]["head"]["status"]["conditions"].append(
        {"type": "Ready", "status": "False", "reason": "x", "message": "\x1b]52;c;aGk=\x07\u202e\x9b2J"}
    )
    serve(stub, fixture)
    for output in ("json", "yaml"):
        result = cluster_cli(["status", "dp-example", *kc, "-o", output])
        assert result.exit_code == 0 and not any(c in result.stdout for c in "\x1b\x07\u202e\x9b"), output


def test_list_as_a_document_against_the_stub(stub: StubKubeApiServer, cluster_cli: ClusterCli, kc: list[str]) -> None:
    stub.put("jobsets", jobset("alpha", replicatedJobsStatus=[{"name": "worker", "ready": 2}]))
    stub.put("jobsets", jobset("beta", "team", slices=4))
    document = documents(cluster_cli, ["list", "-A", *kc])
    assert [(j["namespace"], j["name"], j["state"], j["slices"]) for j in document["jobs"]] == [
        ("default", "alpha", "Starting", "2/2"),
        ("team", "beta", "Pending", "0/4"),
    ]
    assert set(document["jobs"][0]) == {"namespace", "name", "state", "slices", "created", "age"}
    empty = documents(cluster_cli, ["list", "-n", "nobody", *kc])
    assert empty == {"jobs": []}


@pytest.mark.parametrize("command", [["status", "beta"], ["list"], ["logs", "beta"], ["diagnose", "beta"]])
def test_pwdeploy_namespace_is_the_default_namespace_against_the_stub(
    command: list[str], stub: StubKubeApiServer, cluster_cli: ClusterCli, kc: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    stub.put("jobsets", jobset("beta", "team", slices=1))
    monkeypatch.setenv("PWDEPLOY_NAMESPACE", "team")
    cluster_cli([*command, *kc])
    assert any("/namespaces/team/" in r.path for r in stub.requests), [r.path for r in stub.requests]
    assert not any("/namespaces/default/" in r.path for r in stub.requests)


def test_a_question_without_a_terminal_is_exit_2_naming_the_flag_against_the_stub(
    stub: StubKubeApiServer, cluster_cli: ClusterCli, kc: list[str]
) -> None:
    stub.put("jobsets", jobset())
    result = cluster_cli(["delete", "dp-example", *kc])  # no input: as from cron or CI
    assert result.exit_code == 2, result.output
    assert "cannot ask 'Delete jobset dp-example in namespace default? Its pods stop now.'" in result.stderr
    assert "pass -y to answer yes" in result.stderr and "Aborted" not in result.stderr and stub.writes() == []
    answered = cluster_cli(["delete", "dp-example", *kc], input="y\n")  # piped answers still work
    assert answered.exit_code == 0 and len(stub.writes()) == 1
