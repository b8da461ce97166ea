"""Kubeconfig files read as kubectl reads them: a table of kubeconfig shapes (several files merged, --context over a
missing, empty or dangling current-context, same-named entries, missing files, relative paths), each with the
resolution kubectl gives it. The expectations are checked in, and wherever kubectl is installed each row is also
put to ``kubectl config view --minify --raw -o json`` with the same files, so the table is kubectl's own answer."""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from pwdeploy.cli import cli
from pwdeploy.errors import ConfigError
from pwdeploy.kube.kubeconfig import load_kube
from pwdeploy.kube.kubeconfig_files import Origin, kubeconfig_files, merge, resolve
from tests.conftest import SeamRunner
from tests.https_stub import HttpsStubKubeApiServer
from tests.tls import session_pki

KUBECTL = shutil.which("kubectl")
needs_kubectl = pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed: the checked-in table stands")


def cluster(name: str, server: str, **extra: Any) -> dict[str, Any]:
    return {"name": name, "cluster": {"server": server, **extra}}


def user(name: str, token: str) -> dict[str, Any]:
    return {"name": name, "user": {"token": token}}


def context(name: str, cluster_name: str, user_name: str, namespace: str | None = None) -> dict[str, Any]:
    body = {"cluster": cluster_name, "user": user_name, **({"namespace": namespace} if namespace else {})}
    return {"name": name, "context": body}


def kubeconfig(current: str | None = None, **entries: list[dict[str, Any]]) -> dict[str, Any]:
    data: dict[str, Any] = {"apiVersion": "v1", "kind": "Config", **entries}
    if current is not None:
        data["current-context"] = current
    return data


A = kubeconfig(
    "a",
    clusters=[cluster("shared", "https://a.example:443"), cluster("ca", "https://10.0.0.1")],
    users=[user("shared", "token-a"), user("ua", "token-ua")],
    contexts=[context("a", "ca", "ua", "team-a"), context("both", "shared", "shared")],
)
B = kubeconfig(
    "b",
    clusters=[cluster("shared", "https://b.example:443"), cluster("cb", "https://10.0.0.2")],
    users=[user("shared", "token-b"), user("ub", "token-ub")],
    contexts=[context("b", "cb", "ub"), context("both", "cb", "ub", "team-b"), context("cross", "ca", "ub")],
)


@dataclass(frozen=True)
class Case:
    """Files (name -> kubeconfig, None: listed in KUBECONFIG but absent), their order, --context, and kubectl's
    resolution: (context, server, user, token, namespace), or None when kubectl refuses."""

    id: str
    files: dict[str, dict[str, Any] | None]
    order: tuple[str, ...]
    expected: tuple[str, str, str, str, str] | None
    context: str | None = None
    refused: str = ""  # what pwdeploy's ConfigError says when kubectl refuses
    extra: dict[str, Any] = field(default_factory=dict)


CASES = [
    Case("one-file", {"a": A}, ("a",), ("a", "https://10.0.0.1", "ua", "token-ua", "team-a")),
    Case(
        "first-current-context-wins",
        {"a": A, "b": B},
        ("a", "b"),
        ("a", "https://10.0.0.1", "ua", "token-ua", "team-a"),
    ),
    Case(
        "first-current-context-wins-reversed",
        {"a": A, "b": B},
        ("b", "a"),
        ("b", "https://10.0.0.2", "ub", "token-ub", "default"),
    ),
    Case(
        "later-file-sets-current-context",
        {"a": {**A, "current-context": None}, "b": B},
        ("a", "b"),
        ("b", "https://10.0.0.2", "ub", "token-ub", "default"),
    ),
    Case(
        "empty-current-context-is-unset",
        {"a": {**A, "current-context": ""}, "b": B},
        ("a", "b"),
        ("b", "https://10.0.0.2", "ub", "token-ub", "default"),
    ),
    Case(
        "first-same-named-context-cluster-and-user-win",
        {"a": A, "b": B},
        ("a", "b"),
        ("both", "https://a.example:443", "shared", "token-a", "default"),
        context="both",
    ),
    Case(
        "first-same-named-context-wins-reversed",
        {"a": A, "b": B},
        ("b", "a"),
        ("both", "https://10.0.0.2", "ub", "token-ub", "team-b"),
        context="both",
    ),
    Case(
        "context-of-one-file-cluster-of-another",
        {"a": A, "b": B},
        ("b", "a"),
        ("cross", "https://10.0.0.1", "ub", "token-ub", "default"),
        context="cross",
    ),
    Case(
        "missing-files-are-skipped",
        {"gone": None, "a": A, "gone2": None},
        ("gone", "a", "gone2"),
        ("a", "https://10.0.0.1", "ua", "token-ua", "team-a"),
    ),
    Case(
        "context-flag-over-missing-current-context",
        {"a": {**A, "current-context": None}},
        ("a",),
        ("a", "https://10.0.0.1", "ua", "token-ua", "team-a"),
        context="a",
    ),
    Case(
        "context-flag-over-empty-current-context",
        {"a": {**A, "current-context": ""}},
        ("a",),
        ("both", "https://a.example:443", "shared", "token-a", "default"),
        context="both",
    ),
    Case(
        "context-flag-over-dangling-current-context",
        {"a": {**A, "current-context": "deleted"}, "b": {**B, "current-context": None}},
        ("a", "b"),
        ("b", "https://10.0.0.2", "ub", "token-ub", "default"),
        context="b",
    ),
    Case(
        "dangling-current-context-is-refused",
        {"a": {**A, "current-context": "deleted"}},
        ("a",),
        None,
        refused="the current-context 'deleted' of",
    ),
    Case(
        "no-current-context-is-refused",
        {"a": {**A, "current-context": None}},
        ("a",),
        None,
        refused="sets no current-context; pass one of: a, both",
    ),
    Case(
        "a-missing-user-is-refused",
        {"a": {**A, "contexts": [context("a", "ca", "ghost")]}},
        ("a",),
        None,
        refused="its user 'ghost' is not in the kubeconfig",
    ),
    Case(
        "a-missing-cluster-is-refused",
        {"a": {**A, "contexts": [context("a", "gone", "ua")]}},
        ("a",),
        None,
        refused="its cluster 'gone' is not in the kubeconfig",
    ),
    Case("unknown-context-flag-is-refused", {"a": A}, ("a",), None, context="prod", refused="'prod' is not a context"),
]


def write(tmp_path: Path, case: Case) -> str:
    """The files of ``case`` under tmp_path, as a KUBECONFIG value."""
    for name, data in case.files.items():
        if data is not None:
            clean = {k: v for k, v in data.items() if v is not None}
            (tmp_path / name).write_text(yaml.safe_dump(clean), encoding="utf-8")
    return os.pathsep.join(str(tmp_path / name) for name in case.order)


def pwdeploy_resolution(value: str, context: str | None) -> tuple[str, str, str, str, str]:
    origin = Origin(None, "KUBECONFIG", value)
    found = resolve(merge(kubeconfig_files(value), origin), context, origin)
    return found.context, found.cluster["server"], found.user_name, found.user.get("token", ""), found.namespace


def kubectl_resolution(value: str, context: str | None, *flags: str) -> dict[str, Any] | None:
    """What ``kubectl config view --minify --raw -o json`` prints for these files (None: kubectl refuses)."""
    assert KUBECTL is not None
    argv = [KUBECTL, "config", "view", "--minify", "--raw", "-o", "json", *flags]
    if context is not None:
        argv += ["--context", context]
    env = {"KUBECONFIG": value, "PATH": os.environ.get("PATH", ""), "HOME": os.environ.get("HOME", "/")}
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)
    return json.loads(done.stdout) if done.returncode == 0 else None


def summary(view: dict[str, Any]) -> tuple[str, str, str, str, str]:
    (ctx,) = view["contexts"]
    (clu,) = view["clusters"]
    users = view.get("users") or [{"name": "", "user": {}}]
    return (
        ctx["name"],
        clu["cluster"]["server"],
        ctx["context"].get("user", ""),
        users[0]["user"].get("token", ""),
        ctx["context"].get("namespace") or "default",
    )


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_kubeconfig_shapes_resolve_as_the_table_says(tmp_path: Path, case: Case) -> None:
    value = write(tmp_path, case)
    if case.expected is None:
        with pytest.raises(ConfigError, match=case.refused):
            pwdeploy_resolution(value, case.context)
    else:
        assert pwdeploy_resolution(value, case.context) == case.expected


@needs_kubectl
@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_the_table_is_what_kubectl_config_view_prints(tmp_path: Path, case: Case) -> None:
    view = kubectl_resolution(write(tmp_path, case), case.context)
    assert (summary(view) if view is not None else None) == case.expected


def test_load_kube_connects_to_the_first_files_context(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    case = CASES[1]
    monkeypatch.setenv("KUBECONFIG", write(tmp_path, case))
    kube = load_kube()
    assert (kube.context, kube.host, kube.namespace) == ("a", "https://10.0.0.1", "team-a")
    assert kube.api_client.configuration.api_key["BearerToken"] == "Bearer token-ua"


def test_kubeconfig_flag_reads_that_file_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    value = write(tmp_path, CASES[1])
    monkeypatch.setenv("KUBECONFIG", value)
    kube = load_kube(tmp_path / "b")
    assert (kube.context, kube.host) == ("b", "https://10.0.0.2")
    with pytest.raises(ConfigError, match=r"^context: 'a' is not a context in .*/b; available: b, both, cross"):
        load_kube(tmp_path / "b", "a")


# ---------------------------------------------------------------------------------------------- relative paths


def relative_files(tmp_path: Path) -> str:
    """Two kubeconfigs in two directories, each naming a CA file relative to itself; the second's context is used."""
    pki = session_pki()
    for folder, ca in (("one", pki.stranger.ca.pem()), ("two", pki.ca_pem)):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "ca.crt").write_bytes(ca)
    first = kubeconfig(None, clusters=[cluster("c1", "https://1.1.1.1", **{"certificate-authority": "ca.crt"})])
    second = kubeconfig(
        "ctx-y",
        clusters=[cluster("c2", "https://2.2.2.2", **{"certificate-authority": "ca.crt"})],
        users=[{"name": "u", "user": {"tokenFile": "token"}}],
        contexts=[context("ctx-y", "c2", "u")],
    )
    (tmp_path / "two" / "token").write_text("file-token\n")
    (tmp_path / "one" / "config").write_text(yaml.safe_dump(first))
    (tmp_path / "two" / "config").write_text(yaml.safe_dump(second))
    return os.pathsep.join([str(tmp_path / "one" / "config"), str(tmp_path / "two" / "config")])


def test_relative_paths_are_relative_to_the_file_that_names_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    value = relative_files(tmp_path)
    monkeypatch.chdir(tmp_path / "one")  # not where the second file's ca.crt is
    origin = Origin(None, "KUBECONFIG", value)
    found = resolve(merge(kubeconfig_files(value), origin), None, origin)
    assert Path(found.cluster["certificate-authority"]).read_bytes() == session_pki().ca_pem
    monkeypatch.setenv("KUBECONFIG", value)
    kube = load_kube()
    conf = kube.api_client.configuration  # the CA's data as PEM text (ssl's cadata), else its file
    ca = conf.ca_cert_data.encode() if conf.ca_cert_data else Path(str(conf.ssl_ca_cert)).read_bytes()
    assert ca.strip() == session_pki().ca_pem.strip()
    assert conf.api_key["BearerToken"] == "Bearer file-token"


@needs_kubectl
def test_relative_paths_are_what_kubectl_flattens(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    value = relative_files(tmp_path)
    monkeypatch.chdir(tmp_path / "one")
    view = kubectl_resolution(value, None, "--flatten")
    assert view is not None
    (clu,) = view["clusters"]
    assert base64.b64decode(clu["cluster"]["certificate-authority-data"]) == session_pki().ca_pem


# ---------------------------------------------------------------------------------------------- the commands


@pytest.fixture
def two_stubs() -> Iterator[tuple[HttpsStubKubeApiServer, HttpsStubKubeApiServer]]:
    with HttpsStubKubeApiServer() as a, HttpsStubKubeApiServer() as b:
        yield a, b


def test_writes_go_to_the_first_files_cluster_and_say_so_against_https_stubs(
    two_stubs: tuple[HttpsStubKubeApiServer, HttpsStubKubeApiServer], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b = two_stubs
    first = a.write_user_kubeconfig(tmp_path / "a", {"token": "stub-token"}, context="gke_p_us-central1_a")
    second = b.write_user_kubeconfig(tmp_path / "b", {"token": "stub-token"}, context="gke_p_us-central1_b")
    monkeypatch.setenv("KUBECONFIG", f"{first}{os.pathsep}{second}")
    runner = SeamRunner()
    for args in (["delete", "dp-example", "-y"], ["connect", "dp-example", "--delete-on-exit"]):
        result = runner.invoke(cli, args)
        assert result.exit_code == 4, result.output  # there is no such job
        assert result.output.splitlines()[0] == f"pwdeploy: context gke_p_us-central1_a, server {a.url}"
    assert a.requests and b.requests == []
    result = runner.invoke(cli, ["delete", "dp-example", "-y", "--context", "gke_p_us-central1_b"])
    assert result.output.splitlines()[0] == f"pwdeploy: context gke_p_us-central1_b, server {a.url}"  # a's "stub"


def test_the_context_that_is_about_to_change_is_named_in_printable_text_against_https_stub(
    two_stubs: tuple[HttpsStubKubeApiServer, HttpsStubKubeApiServer], tmp_path: Path
) -> None:
    """A context name is text from outside: ESC[1A and CR would rewrite the line above on a terminal, U+202E
    reverse what follows, and the line would name a cluster other than the one about to change."""
    a, _ = two_stubs
    name = "staging\x1b[1A\rpwdeploy: context prod\u202e\nx"
    config = a.write_user_kubeconfig(tmp_path / "a", {"token": "stub-token"}, context=name)
    result = SeamRunner().invoke(cli, ["delete", "dp-example", "-y", "--kubeconfig", str(config)])
    first = result.output.splitlines()[0]
    assert first == f"pwdeploy: context staging^[[1A\\rpwdeploy: context prod\\u202e x, server {a.url}"
