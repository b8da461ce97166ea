"""The Kubernetes API seam against StubKubeApiServer (a loopback stub, not an API server): kubeconfig and
--context loading, the error messages for 401/403/404/409/422/5xx, bounded retries on the clock seam, and answers
that are not what the API promises (HTML pages, cut-off bodies, wrong shapes, no answer at all)."""

from __future__ import annotations

import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from pwdeploy.cluster.jobsets import apply_jobset, get_jobset, list_jobsets
from pwdeploy.errors import ClusterError, ConfigError
from pwdeploy.kube import answers
from pwdeploy.kube.kubeconfig import load_kube
from pwdeploy.kube.seam import JOBSETS, Action, ApiError, Kube, RetryPolicy
from tests.fake_clock import FakeClock
from tests.kube_answers import status_body
from tests.kube_objects import rendered_jobset
from tests.kube_stub import StubKubeApiServer

JOBSET = rendered_jobset("demo", slices=1)


@pytest.fixture
def kubeconfig(stub: StubKubeApiServer, tmp_path: Path) -> Path:
    """Two contexts, two users (this module's tests switch between them)."""
    contexts: dict[str, tuple[str, str | None]] = {"ctx-a": ("stub-token", None), "ctx-b": ("token-b", "team-b")}
    return stub.write_kubeconfig(tmp_path / "kubeconfig", contexts, current="ctx-a")


def get_demo(kube: Kube) -> object:
    return kube.request(Action("get", JOBSETS, "default", "demo"), "GET", JOBSETS.path("default", "demo"))


# ---------------------------------------------------------------------------------------------- connect


def test_current_context_is_used_against_stub(stub: StubKubeApiServer, kube: Kube) -> None:
    assert (kube.context, kube.namespace) == ("ctx-a", "default")
    assert get_jobset(kube, "default", "demo") is None
    assert stub.requests[-1].headers["authorization"] == "Bearer stub-token"


def test_context_flag_picks_user_and_namespace_against_stub(stub: StubKubeApiServer, kubeconfig: Path) -> None:
    kube = load_kube(kubeconfig, "ctx-b")
    assert (kube.context, kube.namespace) == ("ctx-b", "team-b")
    get_jobset(kube, "team-b", "demo")
    assert stub.requests[-1].headers["authorization"] == "Bearer token-b"


def test_kubeconfig_env_var_is_read(stub: StubKubeApiServer, kubeconfig: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KUBECONFIG", f"/does/not/exist:{kubeconfig}")
    kube = load_kube(None, "ctx-b")
    assert kube.context == "ctx-b" and kube.host == stub.url


def test_unknown_context_names_the_available_ones(kubeconfig: Path) -> None:
    with pytest.raises(ConfigError) as info:
        load_kube(kubeconfig, "prod")
    assert info.value.field == "context"
    assert "'prod' is not a context" in str(info.value) and "ctx-a, ctx-b" in str(info.value)


def test_missing_kubeconfig_file_names_the_argument(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"^kubeconfig: .*nope\.yaml does not exist"):
        load_kube(tmp_path / "nope.yaml")


def test_garbage_kubeconfig_is_a_config_error(tmp_path: Path) -> None:
    bad = tmp_path / "kc"
    bad.write_text("contexts: [unclosed\n")
    with pytest.raises(ConfigError, match=r"^kubeconfig: cannot read kubeconfig"):
        load_kube(bad)


@pytest.mark.parametrize("text", ["just some text\n", "- a\n- b\n"])
def test_a_file_that_is_not_a_kubeconfig_says_so(tmp_path: Path, text: str) -> None:
    other = tmp_path / "passwd"
    other.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_kube(other)
    assert str(info.value) == (
        f"kubeconfig: cannot read kubeconfig {other}: it is not a kubeconfig (a YAML mapping with clusters, "
        "contexts and users, each a mapping)"
    )


def test_no_kubeconfig_and_not_in_a_pod(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    with pytest.raises(ConfigError, match="no kubeconfig found") as info:
        load_kube()
    assert f"{tmp_path}/.kube/config does not exist" in str(info.value) and "get-credentials" in str(info.value)


def test_malformed_yaml_names_the_file_and_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bad = tmp_path / "kc"
    bad.write_text("apiVersion: v1\nclusters:\n- name: s\n  cluster: {server: x\ncontexts: []\n")
    with pytest.raises(ConfigError) as info:
        load_kube(bad)
    # libyaml's words (and go-yaml's, which kubectl prints); PyYAML's pure loader says "expected ',' or '}', but got"
    said = str(info.value)
    assert said.startswith(f"kubeconfig: cannot read kubeconfig {bad}: line 5, column 9: ") and "expected ','" in said
    monkeypatch.setenv("KUBECONFIG", str(bad))
    with pytest.raises(ConfigError) as info:
        load_kube()
    assert str(info.value).startswith(f"KUBECONFIG: cannot read kubeconfig {bad}: line 5, column 9: ")


def test_a_user_entry_of_the_wrong_shape_is_a_config_error(stub: StubKubeApiServer, tmp_path: Path) -> None:
    kc = stub.write_kubeconfig(tmp_path / "kc", {"c": ("stub-token", None)}, current="c")
    data = yaml.safe_load(kc.read_text())
    data["users"][0]["user"] = 5
    kc.write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError, match=r"cannot use context 'c' of .*kc: it is not a kubeconfig"):
        load_kube(kc)


def _with_token(kc: Path, token: str) -> Path:
    data = yaml.safe_load(kc.read_text())
    data["users"][0]["user"]["token"] = token
    kc.write_text(yaml.safe_dump(data))
    return kc


def test_a_token_block_scalar_with_a_trailing_newline_works_against_stub(
    stub: StubKubeApiServer, tmp_path: Path
) -> None:
    kc = stub.write_kubeconfig(tmp_path / "kc", {"c": ("x", None)}, current="c")
    kc.write_text(kc.read_text().replace("token: x", "token: |\n      stub-token"))
    assert yaml.safe_load(kc.read_text())["users"][0]["user"]["token"] == "stub-token\n"
    kube = load_kube(kc)
    for _ in range(2):  # the client's refresh hook sets the token again on every request
        assert get_jobset(kube, "default", "demo") is None
        assert stub.requests[-1].headers["authorization"] == "Bearer stub-token"


def test_a_token_file_with_a_trailing_newline_works_against_stub(stub: StubKubeApiServer, tmp_path: Path) -> None:
    (tmp_path / "token").write_text("stub-token\n")
    kc = stub.write_kubeconfig(tmp_path / "kc", {"c": ("x", None)}, current="c")
    kc.write_text(kc.read_text().replace("token: x", f"tokenFile: {tmp_path / 'token'}"))
    assert get_jobset(load_kube(kc), "default", "demo") is None
    assert stub.requests[-1].headers["authorization"] == "Bearer stub-token"


def test_a_token_file_is_read_again_as_kubectl_reads_it_against_stub(stub: StubKubeApiServer, tmp_path: Path) -> None:
    """A projected token the kubelet rotates on disk: client-go keeps a file's token for 50 s (a minute less its
    leeway) and then reads the file again; a long follow must not end with 401 once the old token is revoked. A
    file that cannot be read then keeps the token read before."""
    token = tmp_path / "token"
    token.write_text("stub-token\n")
    kc = stub.write_kubeconfig(tmp_path / "kc", {"c": ("x", None)}, current="c")
    kc.write_text(kc.read_text().replace("token: x", f"tokenFile: {token}"))
    clock = FakeClock()
    kube = load_kube(kc, clock=clock)
    assert get_jobset(kube, "default", "demo") is None
    token.write_text("token-b\n")  # rotated: the old one is revoked
    stub.tokens = {"token-b": "alice"}
    clock.t += 49
    with pytest.raises(ClusterError, match="401"):  # kept 50 s, as client-go keeps it
        get_jobset(kube, "default", "demo")
    clock.t += 1
    assert get_jobset(kube, "default", "demo") is None
    assert stub.requests[-1].headers["authorization"] == "Bearer token-b"
    token.unlink()
    clock.t += 60
    assert get_jobset(kube, "default", "demo") is None  # the file is gone for a moment: the last token is kept
    assert stub.requests[-1].headers["authorization"] == "Bearer token-b"


@pytest.mark.parametrize("token", ["sekret one\n", "sekret\nline-two", " \n"])
def test_a_token_with_a_break_inside_is_refused_without_showing_it(
    stub: StubKubeApiServer, tmp_path: Path, token: str
) -> None:
    kc = _with_token(stub.write_kubeconfig(tmp_path / "kc", {"c": ("x", None)}, current="c"), token)
    with pytest.raises(ConfigError) as info:
        load_kube(kc)
    assert str(info.value).startswith(f"{kc}: user 'user-c' (context 'c'): the token is empty or has a space or line")
    assert "sekret" not in str(info.value) and stub.requests == []


def test_a_server_url_with_userinfo_never_shows_the_password_against_stub(
    stub: StubKubeApiServer, tmp_path: Path
) -> None:
    kc = stub.write_kubeconfig(tmp_path / "kc", {"c": ("stub-token", None)}, current="c")
    kc.write_text(kc.read_text().replace(stub.url, stub.url.replace("://", "://admin:hunter2@")))
    assert "hunter2" in kc.read_text()
    kube = load_kube(kc, clock=FakeClock())
    assert kube.host == stub.url and "hunter2" not in repr(kube.api_client.configuration.host)
    stub.fail("GET", "/jobsets/demo$", 503, times=100)
    with pytest.raises(ApiError) as info:
        get_demo(kube)
    assert f"(context 'c', {stub.url})" in str(info.value) and "hunter2" not in str(info.value)


# ---------------------------------------------------------------------------------------------- errors


def test_401_says_credentials_expired(kubeconfig: Path, stub: StubKubeApiServer) -> None:
    stub.tokens = {"another": "carol"}
    with pytest.raises(ApiError) as info:
        get_demo(load_kube(kubeconfig))
    assert info.value.status == 401
    assert "rejected the credentials (401 Unauthorized) to get jobsets.jobset.x-k8s.io 'demo'" in str(info.value)
    assert "get-credentials" in str(info.value)


def test_403_names_verb_resource_and_rbac_rule(kube: Kube, stub: StubKubeApiServer) -> None:
    stub.forbid("patch", "jobsets")
    with pytest.raises(ApiError) as info:
        apply_jobset(kube, JOBSET, dry_run=False)
    text = str(info.value)
    assert 'User "alice" cannot patch resource "jobsets" in API group "jobset.x-k8s.io"' in text
    assert 'apiGroups: ["jobset.x-k8s.io"], resources: [jobsets], verbs: [patch]' in text
    assert "kubectl auth can-i patch jobsets.jobset.x-k8s.io -n default" in text
    assert len(stub.sent("PATCH")) == 1  # not retried


def test_404_for_an_uninstalled_crd_says_so(kube: Kube, stub: StubKubeApiServer) -> None:
    stub.jobset_installed = False
    with pytest.raises(ApiError) as info:
        get_demo(kube)
    assert info.value.missing == "type"
    assert "does not serve jobset.x-k8s.io/v1alpha2" in str(info.value)
    assert "CustomResourceDefinition is not installed" in str(info.value)


def test_404_for_a_missing_namespace_on_apply(kube: Kube) -> None:
    body = {**JOBSET, "metadata": {"name": "demo", "namespace": "ghost"}}
    with pytest.raises(ApiError) as info:
        apply_jobset(kube, body, dry_run=False)
    assert info.value.missing == "namespace"
    assert "namespace 'ghost' does not exist" in str(info.value)
    assert "kubectl create namespace ghost" in str(info.value)


def test_409_already_exists(kube: Kube, stub: StubKubeApiServer) -> None:
    stub.put("jobsets", {**JOBSET, "metadata": {"name": "demo", "namespace": "default"}})
    action = Action("create", JOBSETS, "default")
    with pytest.raises(
        ApiError,
        match=r'conflict \(409\) to create jobsets.jobset.x-k8s.io in namespace .*"demo" '
        "already exists",
    ) as info:
        kube.request(action, "POST", JOBSETS.path("default"), body=JOBSET)
    assert "--replace" in str(info.value)


def test_422_lists_the_api_field_paths(kube: Kube, stub: StubKubeApiServer) -> None:
    """The CRD's schema refusing a value, as the API server words it (a changed spec of an existing JobSet is the
    JobSet webhook's 403 instead: tests/test_control_plane_stub_shapes.py)."""
    field = "spec.replicatedJobs[0].replicas"
    invalid = f"Invalid value: -1: {field} in body should be greater than or equal to 0"
    refused = status_body(
        422,
        "Invalid",
        f'JobSet.jobset.x-k8s.io "demo" is invalid: {field}: {invalid}',
        {"name": "demo", "group": "jobset.x-k8s.io", "kind": "JobSet", "causes": [
            {"reason": "FieldValueInvalid", "message": invalid, "field": field}
        ]},
    )  # fmt: skip
    stub.answer("PATCH", "/jobsets/demo$", refused, status=422)
    with pytest.raises(ApiError) as info:
        apply_jobset(kube, JOBSET, dry_run=False)
    assert info.value.status == 422
    assert f"(422 Invalid):\n  - {field}: Invalid value: -1" in str(info.value)


# ---------------------------------------------------------------------------------------------- retries


def test_5xx_is_retried_with_backoff_then_succeeds(kube: Kube, stub: StubKubeApiServer, clock: FakeClock) -> None:
    stub.put("jobsets", {**JOBSET, "metadata": {"name": "demo", "namespace": "default"}})
    stub.fail("GET", "/jobsets/demo$", 500, times=2)
    assert get_jobset(kube, "default", "demo") is not None
    assert len(stub.sent("GET", "/jobsets/demo")) == 3
    assert clock.sleeps == [0.5, 1.0]


def test_5xx_gives_up_after_bounded_attempts(kube: Kube, stub: StubKubeApiServer, clock: FakeClock) -> None:
    stub.fail("GET", "/jobsets/demo$", 503, times=100)
    with pytest.raises(ApiError) as info:
        get_demo(kube)
    assert "failed to get jobsets.jobset.x-k8s.io 'demo' in namespace 'default' after 4 attempts: 503" in str(
        info.value
    )
    assert len(stub.sent("GET", "/jobsets/demo")) == RetryPolicy().attempts == 4
    assert clock.sleeps == [0.5, 1.0, 2.0]


def test_429_honours_retry_after(kube: Kube, stub: StubKubeApiServer, clock: FakeClock) -> None:
    stub.fail("GET", "/jobsets/demo$", 429, headers={"Retry-After": "3"})
    assert get_jobset(kube, "default", "demo") is None
    assert clock.sleeps == [3.0]


def test_read_timeout_is_retried(kube: Kube, stub: StubKubeApiServer, clock: FakeClock) -> None:
    kube.timeout = (2.0, 0.2)
    stub.fail("GET", "/jobsets/demo$", 0, delay=0.6)  # no answer in time, then normal service
    assert get_jobset(kube, "default", "demo") is None
    assert len(stub.sent("GET", "/jobsets/demo")) == 2
    assert clock.sleeps == [0.5]


def test_4xx_is_not_retried(kube: Kube, stub: StubKubeApiServer, clock: FakeClock) -> None:
    stub.forbid("get", "jobsets")
    with pytest.raises(ApiError):
        get_demo(kube)
    assert len(stub.sent("GET", "/jobsets/demo")) == 1 and clock.sleeps == []


def test_unreachable_server_is_one_clear_error(tmp_path: Path) -> None:
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    server = StubKubeApiServer()  # only to write the kubeconfig; never started
    kc = server.write_kubeconfig(tmp_path / "kc", {"gone": ("stub-token", None)}, current="gone")
    kc.write_text(kc.read_text().replace(server.url, f"https://127.0.0.1:{port}"))
    server.stop()
    clock = FakeClock()
    with pytest.raises(ApiError) as info:
        get_demo(load_kube(kc, clock=clock))
    text = str(info.value)
    assert text.startswith(f"cannot reach the Kubernetes API server (context 'gone', https://127.0.0.1:{port})")
    assert "after 4 attempts" in text and info.value.status is None
    assert clock.sleeps == [0.5, 1.0, 2.0]


def test_cluster_commands_import_kubernetes_only_when_they_talk_to_a_cluster() -> None:
    code = (
        "import sys\n"
        "from pwdeploy.cli import cli\n"
        "for argv in (['submit', '--help'], ['list', '--help'], ['status', '--help'], ['logs', '--help'],\n"
        "             ['delete', '--help'], ['submit', '--name', 'BAD_NAME']):\n"
        "    try:\n"
        "        cli.main(argv)\n"
        "    except SystemExit as e:\n"
        "        print('EXIT', argv[0], e.code, file=sys.stderr)\n"
        "print('KUBERNETES', 'kubernetes' in sys.modules, file=sys.stderr)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert "KUBERNETES False" in result.stderr, result.stderr
    assert result.stderr.count("EXIT") == 6 and "EXIT submit 2" in result.stderr, result.stderr


def test_a_cluster_command_that_talks_to_a_cluster_imports_no_kubernetes_client_against_stub(kc: list[str]) -> None:
    """The seam speaks REST with urllib3: the official client's models and APIs (0.35 s) are never imported."""
    code = (
        "import sys\n"
        "from pwdeploy.cli import cli\n"
        "try:\n"
        f"    cli.main(['list', *{kc!r}])\n"
        "except SystemExit as e:\n"
        "    print('EXIT', e.code, file=sys.stderr)\n"
        "print('KUBERNETES', sorted(m for m in sys.modules if m.split('.')[0] == 'kubernetes'), file=sys.stderr)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert "EXIT 0" in result.stderr and "KUBERNETES []" in result.stderr, result.stderr


def test_in_cluster_identity_is_tried_without_a_kubeconfig(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    if Path("/var/run/secrets/kubernetes.io/serviceaccount/token").exists():
        pytest.skip("running inside a pod: the in-cluster identity exists here")
    with pytest.raises(ClusterError, match=r"cannot use the in-cluster service account: .*token"):
        load_kube()
    with pytest.raises(ConfigError, match=r"^context: 'ctx' needs a kubeconfig, and none was found"):
        load_kube(None, "ctx")


# ---------------------------------------------------------------------------------------------- hostile answers

HTML = b"<html><head><title>502 Bad Gateway</title></head><body>\x1b[31mnginx</body></html>"


def test_an_html_page_instead_of_json_is_an_api_error_with_its_first_bytes_against_stub(
    kube: Kube, stub: StubKubeApiServer, clock: FakeClock
) -> None:
    stub.answer("GET", "/jobsets/demo$", HTML, content_type="text/html")
    with pytest.raises(ApiError) as info:
        get_demo(kube)
    text = str(info.value)
    assert info.value.status == 200
    assert "to get jobsets.jobset.x-k8s.io 'demo' in namespace 'default' with 200 (text/html, not JSON)" in text
    assert "'<html><head><title>502 Bad Gateway</title></head><body>^[[31mnginx</body></html>'" in text
    assert "\x1b" not in text and "proxy" in text
    assert len(stub.sent("GET", "/jobsets/demo")) == 1 and clock.sleeps == []


def test_a_proxy_error_page_is_retried_then_quoted_against_stub(
    kube: Kube, stub: StubKubeApiServer, clock: FakeClock
) -> None:
    stub.answer("GET", "/jobsets/demo$", HTML * 10, status=502, content_type="text/html", times=100)
    with pytest.raises(ApiError) as info:
        get_demo(kube)
    text = str(info.value)
    assert info.value.status == 502 and "after 4 attempts: 502 Bad Gateway (answer: '<html><head><title>" in text
    assert text.count("nginx") <= 2 and "...'" in text  # only the first bytes


@pytest.mark.parametrize(
    ("body", "what"),
    [
        (b'{"kind": "JobSet", "metadata": {"na', '200 (application/json, not JSON): \'{"kind": "JobSet"'),
        (b'["a", "b"]', "200 (JSON that is a list, not an object)"),
        (b'"just a string"', "200 (JSON that is a string, not an object)"),
    ],
)
def test_an_answer_that_is_not_a_json_object_is_an_api_error_against_stub(
    kube: Kube, stub: StubKubeApiServer, body: bytes, what: str
) -> None:
    stub.answer("GET", "/jobsets/demo$", body)
    with pytest.raises(ApiError, match="with " + re.escape(what)):
        get_demo(kube)


def test_a_body_cut_off_midway_is_an_api_error_against_stub(kube: Kube, stub: StubKubeApiServer) -> None:
    stub.answer("GET", "/jobsets/demo$", {"kind": "JobSet", "metadata": {"name": "demo"}, "spec": {}}, cut_at=20)
    with pytest.raises(ApiError) as info:
        get_demo(kube)
    assert info.value.status == 200
    assert "'demo' in namespace 'default' with 200 that broke off after 20 bytes (ProtocolError): " in str(info.value)
    assert """'{"kind": "JobSet", "'""" in str(info.value)


@pytest.mark.parametrize(
    ("items", "what"),
    [
        ("oops", "`items` that is a string, not a list"),
        ({"a": 1}, "`items` that is an object, not a list"),
        ([5], r"items\[0\] that is not an object with metadata.name"),
        ([{"metadata": {"name": "a"}}, {"metadata": "b"}], r"items\[1\] that is not an object with metadata.name"),
    ],
)
def test_a_list_whose_items_have_the_wrong_shape_is_an_api_error_against_stub(
    kube: Kube, stub: StubKubeApiServer, items: object, what: str
) -> None:
    stub.answer("GET", "/jobsets$", {"kind": "JobSetList", "items": items})
    with pytest.raises(ApiError, match=f"to list jobsets.jobset.x-k8s.io in namespace 'default' with {what}"):
        list_jobsets(kube, "default")


def test_a_huge_answer_is_not_read_against_stub(
    kube: Kube, stub: StubKubeApiServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(answers, "MAX_ANSWER_BYTES", 1000)
    stub.answer("GET", "/jobsets/demo$", {"kind": "JobSet", "pad": "x" * 200_000})
    with pytest.raises(ApiError, match=r"'demo' in namespace 'default' with 200 larger than 0 MiB \(not read\)"):
        get_demo(kube)


def test_a_hung_api_server_is_announced_and_bounded_against_stub(kube: Kube, stub: StubKubeApiServer) -> None:
    notices: list[str] = []
    kube.timeout, kube.deadline, kube.slow_after, kube.on_wait = (1.0, 0.3), 1.0, 0.2, notices.append
    stub.hang("GET", "/jobsets/demo$", times=100)
    with pytest.raises(ApiError) as info:
        get_demo(kube)
    # No retry starts that the deadline would cut short: fewer attempts than the policy allows.
    assert 2 <= len(stub.sent("GET", "/jobsets/demo")) < RetryPolicy().attempts
    assert info.value.status is None and "Read timed out" in str(info.value)
    assert notices == [
        f"still waiting for the Kubernetes API server (context 'ctx-a', {stub.url}) to get jobsets.jobset.x-k8s.io "
        "'demo' in namespace 'default' (giving up after 1 s)"
    ]


def test_a_fast_request_announces_nothing_against_stub(kube: Kube, stub: StubKubeApiServer) -> None:
    notices: list[str] = []
    kube.slow_after, kube.on_wait = 0.2, notices.append
    assert get_jobset(kube, "default", "demo") is None
    time.sleep(0.3)
    assert notices == []


def test_a_status_answer_of_the_wrong_shape_is_still_a_clear_error_against_stub(
    kube: Kube, stub: StubKubeApiServer
) -> None:
    status = {"kind": "Status", "code": 422, "message": "bad \x1b[2J\x1b[31mthing", "details": {"causes": "x"}}
    stub.answer("GET", "/jobsets/demo$", status, status=422)
    with pytest.raises(ApiError) as info:
        get_demo(kube)
    assert "(422 Invalid):\n  - bad ^[[2J^[[31mthing" in str(info.value) and "\x1b" not in str(info.value)
    stub.answer("GET", "/jobsets/demo$", {**status, "details": "x", "code": 404}, status=404)
    with pytest.raises(ApiError) as info:
        get_demo(kube)
    assert info.value.status == 404 and "\x1b" not in str(info.value)


def test_a_negative_or_endless_retry_after_is_ignored() -> None:
    from pwdeploy.kube.api_errors import retry_after

    class Answer(Exception):
        def __init__(self, value: str) -> None:
            super().__init__(value)
            self.headers = {"Retry-After": value}

    assert [retry_after(Answer(v)) for v in ("-5", "inf", "nan", "2")] == [None, None, None, 2.0]


def test_a_password_with_a_slash_never_shows() -> None:
    from pwdeploy.kube.answers import without_userinfo

    assert without_userinfo("https://u:pa/ss@host:443/api") == "https://host:443/api"
    assert without_userinfo("https://host/x?a=b@c") == "https://host/x?a=b@c"


def test_the_in_cluster_identity_reads_the_service_accounts_token_and_ca(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pwdeploy.kube.http_client import Configuration, configure_in_cluster

    (tmp_path / "token").write_text("sa-token\n")
    (tmp_path / "ca.crt").write_text("CA")
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "fd00::1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "6443")
    configuration = Configuration()
    configure_in_cluster(configuration, tmp_path)
    assert configuration.host == "https://[fd00::1]:6443" and configuration.ssl_ca_cert == str(tmp_path / "ca.crt")
    assert configuration.authorization() == "Bearer sa-token"
