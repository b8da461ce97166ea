"""Answers of a cluster that anyone who can patch objects can shape, and lists too big for one answer, against
StubKubeApiServer (a loopback stub, not an API server; it pages lists with ``limit``/``continue`` as the API server
does): each is a clear error (exit 4) or shown as kubectl shows it, never an internal error."""

from __future__ import annotations

import base64
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from pwdeploy import identifiers as ids
from pwdeploy.cluster.jobsets import list_jobsets
from pwdeploy.errors import ConfigError
from pwdeploy.kube.kubeconfig import load_kube
from pwdeploy.kube.seam import LIST_PAGE, PODS, Action, ApiError, Kube
from tests.conftest import REPO, ClusterCli
from tests.kube_objects import rendered_jobset
from tests.kube_stub import StubKubeApiServer
from tests.test_cluster_lifecycle import pod

KUBECTL = shutil.which("kubectl")
EXAMPLE = str(REPO / "examples" / "data_parallel" / "job.yaml")  # dp-example


def no_internal_error(output: str, code: int) -> None:
    assert code != 1 and "internal error" not in output and "Traceback" not in output, output


def many_pods(stub: StubKubeApiServer, count: int) -> None:
    for index in range(count):
        stub.put("pods", {"metadata": {"name": f"p{index:05d}", "namespace": "default"}, "status": {}})


def test_a_list_is_read_in_pages_of_limit_items_against_stub(kube: Kube, stub: StubKubeApiServer) -> None:
    many_pods(stub, 2 * LIST_PAGE + 1)
    names = [p["metadata"]["name"] for p in kube.list_items(Action("list", PODS, "default"), PODS.path("default"))]
    assert names == [f"p{i:05d}" for i in range(2 * LIST_PAGE + 1)]
    sent = stub.sent("GET", "/pods")
    assert stub.pages == 3 and [r.q("limit") for r in sent] == [str(LIST_PAGE)] * 3
    assert [r.q("continue") is None for r in sent] == [True, False, False]


def test_pages_are_decoded_as_they_arrive_against_stub(kube: Kube, stub: StubKubeApiServer) -> None:
    many_pods(stub, 5)
    items = kube.iter_items(Action("list", PODS, "default"), PODS.path("default"), page=2)
    assert next(items)["metadata"]["name"] == "p00000" and stub.pages == 1  # the rest not asked for yet
    assert len(list(items)) == 4 and stub.pages == 3


@pytest.mark.parametrize("token", ["same", 7, "x" * (17 << 10)])
def test_a_continue_token_that_repeats_or_has_the_wrong_shape_ends_the_list_against_stub(
    kube: Kube, stub: StubKubeApiServer, token: object
) -> None:
    page = {"kind": "PodList", "metadata": {"continue": token}, "items": []}
    stub.answer("GET", "/pods$", page, times=100)
    with pytest.raises(ApiError) as caught:
        kube.list_items(Action("list", PODS, "default"), PODS.path("default"))
    assert "metadata.continue" in str(caught.value) and len(stub.sent("GET", "/pods")) <= 2


def test_a_pod_whose_job_index_label_is_not_a_number_does_not_stop_status_against_stub(
    cluster_cli: ClusterCli, kc: list[str], stub: StubKubeApiServer
) -> None:
    stub.put("jobsets", rendered_jobset("dp-example"))
    stub.put("pods", pod(ids.HEAD_JOB))
    odd = pod(ids.WORKER_JOB, 0)
    odd["metadata"]["labels"][ids.JOB_INDEX_LABEL] = "abc"
    stub.put("pods", odd)
    for args in (["status", "dp-example"], ["status", "dp-example", "-o", "json"], ["diagnose", "dp-example"]):
        result = cluster_cli([*args, *kc])
        no_internal_error(result.output, result.exit_code)
        assert result.exit_code in (0, 10), result.output


@pytest.mark.parametrize(
    ("args", "change", "said"),
    [
        (["status", "dp-example"], {"status": {"restarts": "lots"}}, 'status.restarts: "lots", not a count'),
        (["list"], {"status": {"restarts": -1}}, "status.restarts: -1, not a count"),
        (["status", "dp-example"], {"metadata": {"creationTimestamp": "yesterday"}}, "<invalid>"),
        (["list"], {"metadata": {"creationTimestamp": "yesterday"}}, "<invalid>"),
        (["list"], {"metadata": {"creationTimestamp": "2026-01-01T00:00:00"}}, "<invalid>"),  # no zone
    ],
)  # fmt: skip
def test_fields_of_the_wrong_type_are_clear_against_stub(
    cluster_cli: ClusterCli,
    kc: list[str],
    stub: StubKubeApiServer,
    args: list[str],
    change: dict[str, Any],
    said: str,
) -> None:
    live = rendered_jobset("dp-example")
    stub.put("jobsets", live)
    for part, fields in change.items():
        live.setdefault(part, {}).update(fields)
    result = cluster_cli([*args, *kc])
    no_internal_error(result.output, result.exit_code)
    assert said in result.output, result.output
    assert result.exit_code == (0 if said == "<invalid>" else 4)


def test_list_shows_a_hostile_job_name_as_printable_text_against_stub(
    cluster_cli: ClusterCli, kc: list[str], stub: StubKubeApiServer
) -> None:
    live = rendered_jobset("dp-example")
    live["metadata"]["name"] = "evil\x1b]0;pwned\x07\x1b[2J"
    stub.answer("GET", "/jobsets$", {"kind": "JobSetList", "metadata": {}, "items": [live]})
    result = cluster_cli(["list", *kc])
    assert result.exit_code == 0, result.output
    assert "\x1b" not in result.output and "\x07" not in result.output and "evil" in result.output


# ---------------------------------------------------------------------------------------------- kubeconfig files

BOMB = """apiVersion: v1
kind: Config
current-context: c
clusters: [{name: s, cluster: {server: "https://127.0.0.1:1"}}]
contexts: [{name: c, context: {cluster: s, user: u}}]
a: &a ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]
b: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]
c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]
d: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c]
e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d]
f: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e]
g: &g [*f, *f, *f, *f, *f, *f, *f, *f, *f]
users: [{name: u, user: {exec: {apiVersion: client.authentication.k8s.io/v1, command: echo, args: *g}}}]
"""


def test_a_yaml_alias_bomb_in_a_kubeconfig_is_refused_before_any_plugin_runs_as_kubectl_does(
    tmp_path: Path,
) -> None:
    path = tmp_path / "kubeconfig"
    path.write_text(BOMB)
    with pytest.raises(ConfigError) as caught:
        load_kube(path)
    assert "alias bomb" in str(caught.value) and str(path) in str(caught.value)
    if KUBECTL is not None:
        args = [KUBECTL, "--kubeconfig", str(path), "get", "--raw", "/version", "--request-timeout", "2s"]
        done = subprocess.run(args, capture_output=True, text=True, timeout=60, check=False)
        assert done.returncode != 0 and "excessive aliasing" in done.stderr, done.stderr


def test_aliases_a_kubeconfig_may_rightly_use_still_load(stub: StubKubeApiServer, kubeconfig: Path) -> None:
    config = kubeconfig.read_text().replace("users:", "x-common: &common {token: stub-token}\nusers:", 1)
    kubeconfig.write_text(config.replace("token: stub-token", "<<: *common", 1))
    list_jobsets(load_kube(kubeconfig), "default")
    assert stub.requests[-1].headers["authorization"] == "Bearer stub-token"


JUNK_BLOCK = b"-----BEGIN CERTIFICATE-----\nbm90IGEgY2VydGlmaWNhdGU=\n-----END CERTIFICATE-----\n"
KEY_BLOCK = b"-----BEGIN PRIVATE KEY-----\nbm90IGEga2V5\n-----END PRIVATE KEY-----\n"


def with_ca(kubeconfig: Path, pem: bytes) -> Path:
    config = yaml.safe_load(kubeconfig.read_text())
    config["clusters"][0]["cluster"]["certificate-authority-data"] = base64.b64encode(pem).decode()
    kubeconfig.write_text(yaml.safe_dump(config))
    return kubeconfig


def kubectl_version(path: Path) -> subprocess.CompletedProcess[str]:
    args = [str(KUBECTL), "--kubeconfig", str(path), "get", "--raw", "/version", "--request-timeout", "10s"]
    return subprocess.run(args, capture_output=True, text=True, timeout=60, check=False)


def test_a_ca_bundle_with_a_junk_block_works_as_it_does_for_kubectl_against_stub(
    stub: StubKubeApiServer, kubeconfig: Path
) -> None:
    assert stub.ca_pem is not None
    path = with_ca(kubeconfig, JUNK_BLOCK + KEY_BLOCK + b"some words\n" + stub.ca_pem)
    assert list_jobsets(load_kube(path), "default") == []
    if KUBECTL is not None:
        done = kubectl_version(path)
        assert done.returncode == 0, done.stderr


def test_a_ca_bundle_with_no_usable_certificate_is_refused_as_kubectl_refuses_it_against_stub(
    stub: StubKubeApiServer, kubeconfig: Path
) -> None:
    path = with_ca(kubeconfig, JUNK_BLOCK)
    with pytest.raises(ConfigError) as caught:
        load_kube(path)
    assert "certificate-authority-data holds no certificate that can be read" in str(caught.value)
    assert stub.requests == []
    if KUBECTL is not None:
        assert kubectl_version(path).returncode != 0


def test_an_auth_provider_user_is_refused_naming_the_exec_plugin_that_replaces_it(
    stub: StubKubeApiServer, kubeconfig: Path
) -> None:
    config = yaml.safe_load(kubeconfig.read_text())
    config["users"][0]["user"] = {"auth-provider": {"name": "gcp", "config": {"access-token": "ya29.secret"}}}
    kubeconfig.write_text(yaml.safe_dump(config))
    with pytest.raises(ConfigError) as caught:
        load_kube(kubeconfig)
    assert "auth-provider 'gcp' is not supported" in str(caught.value) and "gke-gcloud-auth-plugin" in str(
        caught.value.hint
    )
    assert "ya29" not in str(caught.value) and stub.requests == []


def test_preflight_shows_the_servers_version_string_as_printable_text_against_stub(
    cluster_cli: ClusterCli, kc: list[str], stub: StubKubeApiServer
) -> None:
    version = {"major": "1", "minor": "31", "gitVersion": "v1.31\x1b]0;pwned\x07\x1b[2J"}
    stub.answer("GET", "/version$", version, times=10)
    result = cluster_cli(["preflight", "-f", EXAMPLE, "--cluster", "--no-gcs", *kc])
    row = [line for line in result.output.splitlines() if "kubernetes-version" in line]
    assert row and "v1.31" in row[0] and "\x1b" not in result.output and "\x07" not in result.output


def test_an_expired_continue_token_reads_the_list_again_whole_once_against_stub(
    kube: Kube, stub: StubKubeApiServer
) -> None:
    many_pods(stub, LIST_PAGE + 1)
    stub.expire_continue = 1
    items = kube.list_items(Action("list", PODS, "default"), PODS.path("default"))
    assert len(items) == LIST_PAGE + 1 and len({p["metadata"]["name"] for p in items}) == LIST_PAGE + 1
    assert [r.q("limit") for r in stub.sent("GET", "/pods")] == [str(LIST_PAGE), str(LIST_PAGE), None]
