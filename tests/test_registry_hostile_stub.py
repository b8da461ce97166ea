"""The registry client against hostile or broken loopback registries (the stub of test_registry_stub, and a raw
socket server for answers no HTTP library would send): one deadline per check, bounded bodies, ``found`` only for
a manifest, wrong JSON shapes as ``error``, credentials kept from token services elsewhere or over http, and no
token in any row. The token-realm rules for https hosts (which a loopback stub cannot be) are checked on the
TokenFlow with a recording stand-in for the network.
"""

from __future__ import annotations

import base64
import json
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from pwdeploy.cli import cli
from pwdeploy.imageref import parse_reference
from pwdeploy.preflight.image_checks import check_image
from pwdeploy.registry import responses
from pwdeploy.registry.client import MANIFEST_TYPES, Lookup, RegistryClient
from pwdeploy.registry.credentials import Basic
from pwdeploy.registry.responses import Body
from pwdeploy.registry.token_flow import TokenFlow
from pwdeploy.report import Status
from tests.loopback import LoopbackServer, per_connection
from tests.test_registry_stub import DIGEST, MANIFEST, Reply, Seen, StubRegistry, client, found, stub

__all__ = ["stub"]  # the fixture

MANIFEST_PATH = "/v2/team/app/manifests/v1"
MIB = 1024 * 1024


def head_refused(seen: Seen) -> Reply:
    return 405, {}, b""


def trickle(count: int, pause: float, sent: list[int]) -> Iterator[bytes]:
    """``count`` bytes, one every ``pause`` s, counted in ``sent``."""
    for _ in range(count):
        time.sleep(pause)
        sent[0] += 1
        yield b" "


# ------------------------------------------------------------------------------------------ one deadline


def test_stub_trickling_body_is_cut_off_at_the_deadline(stub: StubRegistry) -> None:
    """One byte every 50 ms for 4 s: each read is quick, the whole answer is not."""
    stub.routes[("HEAD", MANIFEST_PATH)] = head_refused
    sent = [0]
    stub.routes[("GET", MANIFEST_PATH)] = lambda s: (200, {"Content-Type": MANIFEST_TYPES[1]}, trickle(80, 0.05, sent))
    answer = client(deadline=0.5).lookup(stub.ref())
    when_answered = sent[0]
    assert (answer.kind, answer.detail) == ("unreachable", f"{stub.host} did not answer completely within 0.5 s")
    assert when_answered < 80, "the client gave up before the body ended"


@pytest.fixture
def trickling_headers() -> Iterator[tuple[str, list[int]]]:
    """A raw server that sends a status line, then one header line every 50 ms, for 10 s; and the count of header
    lines it has sent."""
    stop = threading.Event()
    sent = [0]

    def serve(conn: socket.socket) -> None:
        conn.recv(65536)
        conn.sendall(b"HTTP/1.1 200 OK\r\n")
        for n in range(200):
            if stop.wait(0.05):
                break
            conn.sendall(f"X-Slow-{n}: 1\r\n".encode())
            sent[0] += 1

    with LoopbackServer(per_connection(serve)) as server:
        yield server.netloc, sent
        stop.set()


def test_stub_trickling_headers_are_cut_off_at_the_deadline(trickling_headers: tuple[str, list[int]]) -> None:
    host, sent = trickling_headers
    answer = client(deadline=0.5).lookup(parse_reference(f"{host}/team/app:v1"))
    when_answered = sent[0]
    assert answer.kind == "unreachable" and "did not answer completely within 0.5 s" in answer.detail
    assert when_answered < 200, "the client gave up before the headers ended"


def test_stub_credential_lookups_do_not_eat_the_registry_deadline(stub: StubRegistry) -> None:
    """A credential helper that takes 0.6 s is not the registry being slow: the deadline (0.5 s) is for answers."""
    challenge = 'Basic realm="stub"'
    wanted = "Basic " + base64.b64encode(b"u:p").decode()
    stub.routes[("HEAD", MANIFEST_PATH)] = lambda s: (
        found(s) if s.headers.get("Authorization") == wanted else (401, {"WWW-Authenticate": challenge}, b"")
    )

    def slow_helper(host: str) -> Basic:
        time.sleep(0.6)
        return Basic("u", "p", "docker-credential-slow")

    answer = client(slow_helper, deadline=0.5).lookup(stub.ref())
    assert (answer.kind, answer.credentials) == ("found", "docker-credential-slow")


# ------------------------------------------------------------------------------------------ bounded bodies


def endless(produced: list[int]) -> Iterator[bytes]:
    for _ in range(64):
        produced.append(1)
        yield b"{" * MIB


def test_stub_huge_body_is_refused_after_a_few_mib(stub: StubRegistry) -> None:
    produced: list[int] = []
    stub.routes[("HEAD", MANIFEST_PATH)] = head_refused
    stub.routes[("GET", MANIFEST_PATH)] = lambda s: (200, {"Content-Type": MANIFEST_TYPES[1]}, endless(produced))
    answer = client(deadline=5.0).lookup(stub.ref())
    assert (answer.kind, answer.detail) == (
        "error",
        f"{stub.host}: sent a body of more than 4 MiB, more than an answer needs",
    )
    time.sleep(0.2)  # the stub notices the hang-up on its next write
    assert len(produced) < 16, f"{len(produced)} MiB were produced before the client hung up"


def test_stub_huge_announced_body_is_not_read(stub: StubRegistry) -> None:
    produced: list[int] = []
    headers = {"Content-Type": MANIFEST_TYPES[1], "Content-Length": str(1024 * MIB)}
    stub.routes[("HEAD", MANIFEST_PATH)] = head_refused
    stub.routes[("GET", MANIFEST_PATH)] = lambda s: (200, headers, endless(produced))
    answer = client(deadline=5.0).lookup(stub.ref())
    assert answer.kind == "error" and f"announced a body of {1024 * MIB} bytes" in answer.detail
    time.sleep(0.2)
    assert len(produced) < 16


# ------------------------------------------------------------------------------------------ found means a manifest


def test_stub_a_login_page_is_not_a_manifest(stub: StubRegistry) -> None:
    stub.routes[("HEAD", MANIFEST_PATH)] = lambda s: (200, {"Content-Type": "text/html"}, b"")
    stub.routes[("GET", MANIFEST_PATH)] = lambda s: (200, {"Content-Type": "text/html"}, b"<html>sign in</html>")
    answer = client().lookup(stub.ref())
    assert (answer.kind, answer.detail) == (
        "error",
        f"{stub.host}: answered 200 but not with an image manifest (Content-Type text/html)",
    )
    row = check_image(f"{stub.host}/team/app:v1", ("main.image",), client().lookup)
    assert row.status is Status.NOT_VERIFIED


def test_stub_an_invalid_digest_header_is_not_taken_on_head(stub: StubRegistry) -> None:
    stub.routes[("HEAD", MANIFEST_PATH)] = lambda s: (200, {"Docker-Content-Digest": "sha256:xyz"}, b"")
    stub.routes[("GET", MANIFEST_PATH)] = lambda s: (200, {"Content-Type": "application/json"}, b'{"ok": true}')
    answer = client().lookup(stub.ref())
    assert answer.kind == "error" and "not with an image manifest (Content-Type application/json)" in answer.detail
    assert [s.method for s in stub.seen] == ["HEAD", "GET"]


def test_stub_a_manifest_named_by_its_media_type_field_is_found(stub: StubRegistry) -> None:
    body = json.dumps({"schemaVersion": 2, "mediaType": MANIFEST_TYPES[3]}).encode()
    stub.routes[("HEAD", MANIFEST_PATH)] = head_refused
    stub.routes[("GET", MANIFEST_PATH)] = lambda s: (200, {"Content-Type": "application/json"}, body)
    assert client().lookup(stub.ref()).kind == "found"


def test_stub_a_digest_header_that_names_other_bytes_is_an_error(stub: StubRegistry) -> None:
    other = "sha256:" + "0" * 64
    stub.routes[("HEAD", MANIFEST_PATH)] = head_refused
    stub.routes[("GET", MANIFEST_PATH)] = lambda s: (
        200,
        {"Content-Type": MANIFEST_TYPES[1], "Docker-Content-Digest": other},
        MANIFEST,
    )
    answer = client().lookup(stub.ref())
    assert answer.kind == "error" and f"whose digest is {DIGEST}, not the {other} it named" in answer.detail


def test_stub_a_digest_reference_answered_with_another_digest_is_an_error(stub: StubRegistry) -> None:
    asked = "sha256:" + "1" * 64
    stub.routes[("HEAD", f"/v2/team/app/manifests/{asked}")] = found  # answers DIGEST
    answer = client().lookup(stub.ref(f"team/app@{asked}"))
    assert answer.kind == "error" and f"answered the manifest {DIGEST} when asked for {asked}" in answer.detail


# ------------------------------------------------------------------------------------------ wrong shapes


def missing(seen: Seen) -> Reply:
    return 404, {}, b""


@pytest.mark.parametrize(
    ("manifest_body", "tags_body", "said"),
    [
        (b"", b'{"tags": 5}', "answered the tag list with a 'tags' that is not a list of strings"),
        (b"", b'{"tags": [1, 2]}', "answered the tag list with a 'tags' that is not a list of strings"),
        (b'{"errors": 5}', b"", "answered 404 with an 'errors' that is not a list of objects"),
        (b'{"errors": ["x"]}', b"", "answered 404 with an 'errors' that is not a list of objects"),
    ],
)
def test_stub_wrong_json_shapes_are_not_verified_rows(
    stub: StubRegistry, manifest_body: bytes, tags_body: bytes, said: str
) -> None:
    stub.routes[("HEAD", MANIFEST_PATH)] = head_refused
    stub.routes[("GET", MANIFEST_PATH)] = lambda s: (404, {}, manifest_body)
    stub.routes[("GET", "/v2/team/app/tags/list")] = lambda s: (200, {}, tags_body)
    answer = client().lookup(stub.ref())
    assert (answer.kind, answer.detail) == ("error", f"{stub.host}: {said}")
    row = check_image(f"{stub.host}/team/app:v1", ("main.image",), client().lookup)
    assert row.status is Status.NOT_VERIFIED


def test_stub_null_tags_and_odd_json_are_read_as_nothing(stub: StubRegistry) -> None:
    stub.routes[("HEAD", MANIFEST_PATH)] = missing
    stub.routes[("GET", "/v2/team/app/tags/list")] = lambda s: (200, {}, b'{"tags": null}')
    assert client().lookup(stub.ref()).kind == "manifest_unknown"
    stub.routes[("GET", "/v2/team/app/tags/list")] = lambda s: (200, {}, b"[1, 2, 3]")
    assert client().lookup(stub.ref()).tags == ()


def test_stub_a_token_of_the_wrong_type_is_an_error(stub: StubRegistry) -> None:
    challenge = f'Bearer realm="http://{stub.host}/token",service="s"'
    stub.routes[("HEAD", MANIFEST_PATH)] = lambda s: (401, {"WWW-Authenticate": challenge}, b"")
    stub.routes[("GET", "/token")] = lambda s: (200, {}, b'{"token": 5}')
    answer = client().lookup(stub.ref())
    assert (answer.kind, answer.detail) == ("error", f"{stub.host}: the token service answered without a token string")


# ------------------------------------------------------------------------------------------ tokens stay secret


def token_registry(stub: StubRegistry, token: str, realm_host: str | None = None) -> None:
    realm = f"http://{realm_host or stub.host}/token"
    challenge = f'Bearer realm="{realm}",service="s"'

    def manifest(seen: Seen) -> Reply:
        if seen.headers.get("Authorization") != f"Bearer {token.strip()}":
            return 401, {"WWW-Authenticate": challenge}, b'{"errors": [{"code": "UNAUTHORIZED"}]}'
        return found(seen)

    stub.routes[("HEAD", MANIFEST_PATH)] = manifest
    stub.routes[("GET", "/token")] = lambda s: (200, {}, json.dumps({"token": token}).encode())


def test_stub_a_token_with_a_trailing_newline_is_stripped_and_works(stub: StubRegistry) -> None:
    token_registry(stub, "tkn-secret-123\n")
    answer = client().lookup(stub.ref())
    assert (answer.kind, answer.detail) == ("found", DIGEST)


@pytest.mark.parametrize("token", ["tkn secret-123", "tkn\nsecret-123", "tkn-secret-123\x00"])
def test_stub_a_token_that_cannot_be_a_header_is_an_error_and_never_printed(stub: StubRegistry, token: str) -> None:
    token_registry(stub, token)
    row = check_image(f"{stub.host}/team/app:v1", ("main.image",), client().lookup)
    assert row.status is Status.NOT_VERIFIED
    assert "cannot be sent in a header (not printed)" in row.message
    shown = json.dumps(row.as_json())
    assert "secret-123" not in shown and "tkn" not in shown


def test_secrets_and_userinfo_are_scrubbed_from_words() -> None:
    text = "refused Bearer tkn-secret at https://user:pa55@host/token: tkn-secret"
    assert responses.scrub(text, ["tkn-secret\n"]) == "refused Bearer <hidden> at https://host/token: <hidden>"


# ------------------------------------------------------------------------------------------ credentials stay home


def test_stub_realm_on_another_host_over_http_gets_no_credentials(stub: StubRegistry) -> None:
    """The registry is 127.0.0.1:<port>; its challenge names a realm on localhost: another host, plain http."""
    port = stub.host.rsplit(":", 1)[1]
    token_registry(stub, "tkn", realm_host=f"localhost:{port}")
    asked: list[str] = []

    def known(host: str) -> Basic:
        asked.append(host)
        return Basic("alice", "s3cret-pw", "docker config")

    answer = client(known).lookup(stub.ref())
    token = next(s for s in stub.seen if s.path == "/token")
    assert "Authorization" not in token.headers
    assert (answer.kind, answer.credentials) == ("found", None)
    assert answer.withheld == (
        f"the credentials from docker config were not sent to the token service at http://localhost:{port}: plain http"
    )
    row = check_image(f"{stub.host}/team/app:v1", ("main.image",), client(known).lookup)
    assert row.message == f"exists, digest {DIGEST} (asked anonymously; {answer.withheld})"
    assert asked[0] == stub.host


def test_stub_realm_on_the_loopback_registry_itself_gets_its_credentials(stub: StubRegistry) -> None:
    token_registry(stub, "tkn")
    answer = client(lambda host: Basic("alice", "s3cret-pw", "docker config")).lookup(stub.ref())
    token = next(s for s in stub.seen if s.path == "/token")
    assert token.headers["Authorization"] == "Basic " + base64.b64encode(b"alice:s3cret-pw").decode()
    assert (answer.credentials, answer.withheld) == ("docker config", None)
    assert Lookup("found", DIGEST, credentials="docker config").how == "with credentials from docker config"


class Recorder:
    """A stand-in for the network: records what TokenFlow sends and answers with a token."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, dict[str, str]]] = []

    def __call__(self, method: str, url: str, headers: dict[str, str], params: dict[str, str] | None) -> Body:
        self.sent.append((url, headers))
        return Body(200, {}, b'{"token": "t"}')


@pytest.mark.parametrize(
    ("image", "realm", "sent_to", "withheld"),
    [
        ("us-docker.pkg.dev/p/r/app:1", "https://us-docker.pkg.dev/v2/token", True, None),
        ("us-docker.pkg.dev/p/r/app:1", "https://evil.example/token", False, "a host other than us-docker.pkg.dev's"),
        ("us-docker.pkg.dev/p/r/app:1", "http://us-docker.pkg.dev/v2/token", False, "plain http"),
        ("us-docker.pkg.dev/p/r/app:1", "https://us-docker.pkg.dev.evil.example/t", False, "a host other than"),
        ("python:3.12-slim", "https://auth.docker.io/token", True, None),
        ("python:3.12-slim", "http://auth.docker.io/token", False, "plain http"),
        ("127.0.0.1:5000/app:1", "http://127.0.0.1:5001/token", True, None),
        ("127.0.0.1:5000/app:1", "http://localhost:5000/token", False, "plain http"),
        ("myhost:5000/app:1", "http://myhost:5000/token", False, "plain http"),
    ],
)
def test_token_flow_sends_credentials_only_to_the_registrys_own_hosts_over_https(
    image: str, realm: str, sent_to: bool, withheld: str | None
) -> None:
    recorder = Recorder()
    flow = TokenFlow(parse_reference(image), lambda host: Basic("u", "pw", "docker config"), recorder)
    assert flow.answer(f'Bearer realm="{realm}",service="s"')
    ((_, headers),) = recorder.sent
    assert ("Authorization" in headers) is sent_to
    assert flow.used == ("docker config" if sent_to else None)
    if withheld is None:
        assert flow.withheld is None
    else:
        assert withheld in (flow.withheld or "")


def test_token_flow_drops_userinfo_from_the_realm() -> None:
    recorder = Recorder()
    flow = TokenFlow(parse_reference("ghcr.io/o/app:1"), lambda host: None, recorder)
    assert flow.answer('Bearer realm="https://user:pw@ghcr.io/token"')
    assert recorder.sent[0][0] == "https://ghcr.io/token"


def test_registry_client_needs_no_network_for_a_bad_realm(stub: StubRegistry) -> None:
    stub.routes[("HEAD", MANIFEST_PATH)] = lambda s: (
        401,
        {"WWW-Authenticate": 'Bearer realm="file:///etc/passwd"'},
        b"",
    )
    answer = RegistryClient(lambda host: None, deadline=2.0).lookup(stub.ref())
    assert (answer.kind, answer.detail) == ("error", f"{stub.host}: named a token realm that is not an http(s) URL")


def test_stub_credentials_echoed_in_an_error_message_are_not_printed(stub: StubRegistry) -> None:
    """A registry that repeats the password (or the Basic header's base64) in its error: the row hides both."""
    echoed = base64.b64encode(b"alice:s3cret-pw").decode()
    body = json.dumps({"errors": [{"code": "DENIED", "message": f"bad login s3cret-pw ({echoed})"}]}).encode()
    stub.routes[("HEAD", MANIFEST_PATH)] = head_refused
    stub.routes[("GET", MANIFEST_PATH)] = lambda s: (401, {"WWW-Authenticate": 'Basic realm="stub"'}, body)
    lookup = client(lambda host: Basic("alice", "s3cret-pw", "docker config")).lookup
    row = check_image(f"{stub.host}/team/app:v1", ("main.image",), lookup)
    assert row.status is Status.NOT_VERIFIED and "refused access with credentials from docker config" in row.message
    shown = json.dumps(row.as_json())
    assert "s3cret-pw" not in shown and echoed not in shown and "<hidden>" in shown


# ------------------------------------------------------------------------------------------ redirects


def test_stub_a_redirect_with_a_huge_body_is_not_read(stub: StubRegistry) -> None:
    produced: list[int] = []
    stub.routes[("HEAD", MANIFEST_PATH)] = head_refused
    stub.routes[("GET", MANIFEST_PATH)] = lambda s: (
        302,
        {"Location": "/v2/team/app/manifests/moved"},
        endless(produced),
    )
    stub.routes[("GET", "/v2/team/app/manifests/moved")] = lambda s: (
        200,
        {"Content-Type": MANIFEST_TYPES[1]},
        MANIFEST,
    )
    answer = client(deadline=5.0).lookup(stub.ref())
    assert (answer.kind, answer.detail) == ("found", DIGEST)
    time.sleep(0.2)
    assert len(produced) < 16, f"{len(produced)} MiB of a redirect's body were produced"


def test_stub_a_redirect_to_another_host_goes_without_the_authorization(stub: StubRegistry) -> None:
    port = stub.host.rsplit(":", 1)[1]
    wanted = "Basic " + base64.b64encode(b"alice:s3cret-pw").decode()

    def manifest(seen: Seen) -> Reply:
        if seen.headers.get("Authorization") != wanted:
            return 401, {"WWW-Authenticate": 'Basic realm="stub"'}, b""
        return 307, {"Location": f"http://localhost:{port}/v2/elsewhere/manifests/v1"}, b""

    stub.routes[("HEAD", MANIFEST_PATH)] = manifest
    stub.routes[("HEAD", "/v2/elsewhere/manifests/v1")] = found
    answer = client(lambda host: Basic("alice", "s3cret-pw", "docker config")).lookup(stub.ref())
    assert answer.kind == "found"
    elsewhere = next(s for s in stub.seen if s.path == "/v2/elsewhere/manifests/v1")
    assert "Authorization" not in elsewhere.headers


def test_stub_a_redirect_loop_is_an_error(stub: StubRegistry) -> None:
    stub.routes[("HEAD", MANIFEST_PATH)] = lambda s: (302, {"Location": MANIFEST_PATH}, b"")
    answer = client().lookup(stub.ref())
    assert (answer.kind, answer.detail) == ("error", f"{stub.host}: redirected more than 5 times")


# ------------------------------------------------------------------------------------------ the CLI's -o json


@pytest.mark.parametrize(("token", "status"), [("tkn-secret-123\n", "ok"), ("tkn\nsecret-123", "not verified")])
def test_stub_preflight_json_never_holds_the_token(stub: StubRegistry, tmp_path: Path, token: str, status: str) -> None:
    repositories = ("pw/server", "pw/proxy_server", "team/app")
    tags = {"pw/server": "20260730-jax_0.10.2", "pw/proxy_server": "20260730-jax_0.10.2", "team/app": "v1"}
    challenge = f'Bearer realm="http://{stub.host}/token",service="s"'

    def manifest(seen: Seen) -> Reply:
        if seen.headers.get("Authorization") != f"Bearer {token.strip()}":
            return 401, {"WWW-Authenticate": challenge}, b""
        return found(seen)

    for repository in repositories:
        stub.routes[("HEAD", f"/v2/{repository}/manifests/{tags[repository]}")] = manifest
    stub.routes[("GET", "/token")] = lambda s: (200, {}, json.dumps({"token": token}).encode())
    image = {repository: f"{stub.host}/{repository}:{tags[repository]}" for repository in repositories}
    args = [
        "preflight", "-o", "json", "--no-gcs", "--name", "pf", "--tpu-type", "v5p-8", "--command", "python3 t.py",
        "--pathways-version", "0.10.2", "--allow-version-mismatch", "--gcs-scratch", "gs://bkt/s",
        "--server-image", image["pw/server"], "--proxy-server-image", image["pw/proxy_server"],
        "--image", image["team/app"],
    ]  # fmt: skip
    result = CliRunner().invoke(cli, args, env={"DOCKER_CONFIG": str(tmp_path)})
    assert "Traceback" not in result.output
    rows = json.loads(result.stdout)["checks"]
    assert [row["status"] for row in rows] == [status] * 3
    assert "tkn" not in result.output and "secret-123" not in result.output
