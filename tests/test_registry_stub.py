"""The registry client against a loopback HTTP stub (token flow, Accept headers, HEAD refused, timeouts), and
credential lookup from a docker config with a stand-in credential helper. Reference parsing is pure.

The stub answers only what each test scripts; the client's behaviour against a real registry is in
tests/test_preflight_images.py.
"""

from __future__ import annotations

import base64
import hashlib
import json
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest

from pwdeploy.imageref import BadReference, ImageRef, is_digest, parse_reference
from pwdeploy.registry import credentials as creds
from pwdeploy.registry.client import ACCEPT, MANIFEST_TYPES, RegistryClient
from pwdeploy.registry.credentials import Basic, Credentials
from tests.loopback import LoopbackServer

MANIFEST = b'{"schemaVersion": 2}'
DIGEST = "sha256:" + hashlib.sha256(MANIFEST).hexdigest()


@dataclass
class Seen:
    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]


Reply = tuple[int, dict[str, str], "bytes | Iterable[bytes]"]  # an iterable body is streamed, without a length
Route = Callable[[Seen], Reply]


@dataclass
class StubRegistry:
    """A loopback HTTP server answering (method, path) with scripted replies; every request is recorded."""

    routes: dict[tuple[str, str], Route] = field(default_factory=dict)
    seen: list[Seen] = field(default_factory=list)
    delay: float = 0.0
    host: str = ""
    hung_up: int = 0  # streamed answers the client stopped reading

    def ref(self, path: str = "team/app:v1") -> ImageRef:
        return parse_reference(f"{self.host}/{path}")

    def paths(self) -> list[tuple[str, str]]:
        return [(s.method, s.path) for s in self.seen]


@pytest.fixture
def stub() -> Iterator[StubRegistry]:
    registry = StubRegistry()

    class Handler(BaseHTTPRequestHandler):
        def _handle(self) -> None:
            parts = urlsplit(self.path)
            seen = Seen(self.command, parts.path, parse_qs(parts.query), dict(self.headers.items()))
            registry.seen.append(seen)
            time.sleep(registry.delay)
            route = registry.routes.get((self.command, parts.path))
            status, headers, body = route(seen) if route else (404, {}, b'{"errors": [{"code": "NOT_SCRIPTED"}]}')
            self.send_response(status)
            for name, value in headers.items():
                self.send_header(name, value)
            if isinstance(body, bytes) and "Content-Length" not in headers:
                self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command == "HEAD":
                return
            try:
                for chunk in [body] if isinstance(body, bytes) else body:
                    self.wfile.write(chunk)
                    self.wfile.flush()
            except (BrokenPipeError, ConnectionResetError):
                registry.hung_up += 1

        do_GET = do_HEAD = _handle

        def log_message(self, format: str, *args: object) -> None:
            pass

    with LoopbackServer(Handler) as server:
        registry.host = server.netloc
        yield registry


def found(seen: Seen) -> Reply:
    return 200, {"Docker-Content-Digest": DIGEST, "Content-Type": MANIFEST_TYPES[0]}, MANIFEST


def anonymous(host: str) -> Basic | None:
    return None


def client(lookup: Callable[[str], Basic | None] = anonymous, deadline: float = 2.0) -> RegistryClient:
    return RegistryClient(lookup, deadline=deadline)


# ------------------------------------------------------------------------------------------ manifest requests


def test_stub_head_sends_every_manifest_type_and_reads_the_digest(stub: StubRegistry) -> None:
    stub.routes[("HEAD", "/v2/team/app/manifests/v1")] = found
    answer = client().lookup(stub.ref())
    assert (answer.kind, answer.detail, answer.credentials) == ("found", DIGEST, None)
    (request,) = stub.seen
    assert request.method == "HEAD"
    accepted = [part.strip() for part in request.headers["Accept"].split(",")]
    assert accepted == [
        "application/vnd.oci.image.index.v1+json",
        "application/vnd.oci.image.manifest.v1+json",
        "application/vnd.docker.distribution.manifest.list.v2+json",
        "application/vnd.docker.distribution.manifest.v2+json",
    ]
    assert request.headers["Accept"] == ACCEPT and "Authorization" not in request.headers


def test_stub_head_refused_falls_back_to_get(stub: StubRegistry) -> None:
    stub.routes[("HEAD", "/v2/team/app/manifests/v1")] = lambda s: (405, {}, b"")
    stub.routes[("GET", "/v2/team/app/manifests/v1")] = found
    answer = client().lookup(stub.ref())
    assert (answer.kind, answer.detail) == ("found", DIGEST)
    assert stub.paths() == [("HEAD", "/v2/team/app/manifests/v1"), ("GET", "/v2/team/app/manifests/v1")]
    assert stub.seen[1].headers["Accept"] == ACCEPT


def test_stub_without_digest_header_the_digest_is_the_manifest_hash(stub: StubRegistry) -> None:
    stub.routes[("HEAD", "/v2/team/app/manifests/v1")] = lambda s: (200, {}, b"")
    stub.routes[("GET", "/v2/team/app/manifests/v1")] = lambda s: (200, {"Content-Type": MANIFEST_TYPES[1]}, MANIFEST)
    answer = client().lookup(stub.ref())
    assert (answer.kind, answer.detail) == ("found", "sha256:" + hashlib.sha256(MANIFEST).hexdigest())


def test_stub_digest_reference_asks_by_digest(stub: StubRegistry) -> None:
    stub.routes[("HEAD", f"/v2/team/app/manifests/{DIGEST}")] = found
    answer = client().lookup(stub.ref(f"team/app:v1@{DIGEST}"))
    assert answer.kind == "found" and stub.paths() == [("HEAD", f"/v2/team/app/manifests/{DIGEST}")]


# ------------------------------------------------------------------------------------------ missing things


def test_stub_missing_tag_lists_the_tags(stub: StubRegistry) -> None:
    stub.routes[("HEAD", "/v2/team/app/manifests/v1")] = lambda s: (404, {}, b"")
    stub.routes[("GET", "/v2/team/app/tags/list")] = lambda s: (200, {}, b'{"name": "team/app", "tags": ["v0", "v2"]}')
    answer = client().lookup(stub.ref())
    assert answer.kind == "manifest_unknown" and answer.tags == ("v0", "v2")
    assert answer.detail == f"tag 'v1' is not in {stub.host}/team/app"


def test_stub_missing_repository_is_told_by_the_tag_list(stub: StubRegistry) -> None:
    stub.routes[("HEAD", "/v2/team/app/manifests/v1")] = lambda s: (404, {}, b"")
    stub.routes[("GET", "/v2/team/app/tags/list")] = lambda s: (404, {}, b'{"errors": [{"code": "NAME_UNKNOWN"}]}')
    answer = client().lookup(stub.ref())
    assert answer.kind == "name_unknown" and answer.detail == f"repository {stub.host}/team/app does not exist"


def test_stub_name_unknown_in_a_get_body_needs_no_tag_list(stub: StubRegistry) -> None:
    stub.routes[("HEAD", "/v2/team/app/manifests/v1")] = lambda s: (405, {}, b"")
    body = b'{"errors": [{"code": "NAME_UNKNOWN", "message": "repository name not known to registry"}]}'
    stub.routes[("GET", "/v2/team/app/manifests/v1")] = lambda s: (404, {}, body)
    assert client().lookup(stub.ref()).kind == "name_unknown"
    assert ("GET", "/v2/team/app/tags/list") not in stub.paths()


# ------------------------------------------------------------------------------------------ authentication


def bearer_registry(stub: StubRegistry, *, token_auth: Callable[[Seen], bool] = lambda s: True) -> None:
    """Manifests need ``Bearer tkn``; the token service at /token hands it out when ``token_auth`` agrees."""
    challenge = f'Bearer realm="http://{stub.host}/token",service="stub-registry",scope="repository:team/app:pull"'

    def manifest(seen: Seen) -> Reply:
        if seen.headers.get("Authorization") != "Bearer tkn":
            return 401, {"WWW-Authenticate": challenge}, b'{"errors": [{"code": "UNAUTHORIZED"}]}'
        return found(seen)

    def token(seen: Seen) -> Reply:
        if not token_auth(seen):
            return 401, {}, b'{"errors": [{"code": "DENIED", "message": "bad credentials"}]}'
        return 200, {"Content-Type": "application/json"}, json.dumps({"token": "tkn", "expires_in": 300}).encode()

    stub.routes[("HEAD", "/v2/team/app/manifests/v1")] = manifest
    stub.routes[("GET", "/token")] = token


def test_stub_bearer_flow_anonymous_token_for_a_public_repository(stub: StubRegistry) -> None:
    bearer_registry(stub)
    answer = client().lookup(stub.ref())
    assert (answer.kind, answer.credentials) == ("found", None)
    first, token, again = stub.seen
    assert (first.path, token.path, again.path) == ("/v2/team/app/manifests/v1", "/token", "/v2/team/app/manifests/v1")
    assert token.query == {"service": ["stub-registry"], "scope": ["repository:team/app:pull"]}
    assert "Authorization" not in token.headers
    assert again.headers["Authorization"] == "Bearer tkn" and again.headers["Accept"] == ACCEPT


def test_stub_bearer_flow_sends_known_credentials_to_the_token_service(stub: StubRegistry) -> None:
    expected = "Basic " + base64.b64encode(b"oauth2accesstoken:ya29.token").decode()
    bearer_registry(stub, token_auth=lambda seen: seen.headers.get("Authorization") == expected)
    asked: list[str] = []

    def lookup(host: str) -> Basic:
        asked.append(host)
        return Basic("oauth2accesstoken", "ya29.token", "Application Default Credentials")

    answer = client(lookup).lookup(stub.ref())
    assert (answer.kind, answer.credentials) == ("found", "Application Default Credentials")
    assert asked == [stub.host]


def test_stub_token_service_refusal_is_denied(stub: StubRegistry) -> None:
    bearer_registry(stub, token_auth=lambda seen: False)
    answer = client(lambda host: Basic("u", "wrong", "docker config")).lookup(stub.ref())
    assert answer.kind == "denied"
    assert answer.detail.endswith(
        "the token service refused (401: DENIED bad credentials), asked with credentials from docker config"
    )


def test_stub_credentials_are_not_looked_up_unless_challenged(stub: StubRegistry) -> None:
    stub.routes[("HEAD", "/v2/team/app/manifests/v1")] = found
    asked: list[str] = []

    def lookup(host: str) -> None:
        asked.append(host)

    assert client(lookup).lookup(stub.ref()).kind == "found"
    assert asked == []


def test_stub_basic_challenge_uses_docker_config_credentials(stub: StubRegistry, tmp_path: Path) -> None:
    wanted = "Basic " + base64.b64encode(b"alice:s3cret").decode()

    def manifest(seen: Seen) -> Reply:
        if seen.headers.get("Authorization") != wanted:
            return 401, {"WWW-Authenticate": 'Basic realm="stub"'}, b""
        return found(seen)

    stub.routes[("HEAD", "/v2/team/app/manifests/v1")] = manifest
    write_config(tmp_path, {"auths": {f"http://{stub.host}": {"auth": b64("alice:s3cret")}}})
    answer = client(Credentials(tmp_path, helper_path="").for_registry).lookup(stub.ref())
    assert (answer.kind, answer.credentials) == ("found", "docker config")


def test_stub_still_unauthorized_after_the_token_is_denied_not_found(stub: StubRegistry) -> None:
    challenge = f'Bearer realm="http://{stub.host}/token",service="s"'
    stub.routes[("HEAD", "/v2/team/app/manifests/v1")] = lambda s: (401, {"WWW-Authenticate": challenge}, b"")
    stub.routes[("GET", "/token")] = lambda s: (200, {}, b'{"access_token": "t"}')
    answer = client().lookup(stub.ref())
    assert answer.kind == "denied" and "refused access anonymously (401)" in answer.detail
    token = next(s for s in stub.seen if s.path == "/token")
    assert token.query["scope"] == ["repository:team/app:pull"]  # docker's scope when the challenge names none


def test_stub_server_error_is_an_error_not_a_verdict(stub: StubRegistry) -> None:
    stub.routes[("HEAD", "/v2/team/app/manifests/v1")] = lambda s: (503, {}, b"")
    answer = client().lookup(stub.ref())
    assert (answer.kind, answer.detail) == ("error", f"{stub.host} answered 503")


def test_stub_slow_registry_times_out_as_unreachable(stub: StubRegistry) -> None:
    stub.delay = 1.0
    stub.routes[("HEAD", "/v2/team/app/manifests/v1")] = found
    answer = client(deadline=0.3).lookup(stub.ref())  # the answer, after 1 s, would be found
    assert answer.kind == "unreachable" and "did not answer completely within 0.3 s" in answer.detail


# ------------------------------------------------------------------------------------------ credentials


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def write_config(directory: Path, config: dict[str, object]) -> None:
    (directory / "config.json").write_text(json.dumps(config))


def fake_helper(directory: Path, name: str, secrets: dict[str, str]) -> Path:
    """A docker-credential-<name> that answers `get` for the servers in ``secrets`` and logs what it was asked."""
    log = directory / f"{name}.log"
    cases = "\n".join(
        f'  "{server}") echo \'{{"ServerURL": "{server}", "Username": "u-{name}", "Secret": "{secret}"}}\' ;;'
        for server, secret in secrets.items()
    )
    script = directory / f"docker-credential-{name}"
    script.write_text(
        f'#!/bin/sh\n[ "$1" = get ] || exit 1\nread -r server\necho "$server" >> {log}\n'
        f'case "$server" in\n{cases}\n  *) echo "credentials not found in native keychain"; exit 1 ;;\nesac\n'
    )
    script.chmod(0o755)
    return log


def no_google_token() -> str | None:
    raise AssertionError("Application Default Credentials must not be asked here")


def test_stub_helper_auths_and_store_in_docker_order(tmp_path: Path) -> None:
    helper_log = fake_helper(tmp_path, "gcloud", {"us-docker.pkg.dev": "from-helper"})
    store_log = fake_helper(tmp_path, "store", {"https://index.docker.io/v1/": "hub-secret", "quay.io": "quay"})
    write_config(
        tmp_path,
        {
            "credHelpers": {"us-docker.pkg.dev": "gcloud"},
            "auths": {"https://index.docker.io/v1/": {}, "registry.example.com": {"auth": b64("bob:pw:with:colons")}},
            "credsStore": "store",
        },
    )
    found = Credentials(tmp_path, helper_path=str(tmp_path), google_token=no_google_token)
    assert found.for_registry("us-docker.pkg.dev") == Basic("u-gcloud", "from-helper", "docker-credential-gcloud")
    assert found.for_registry("registry.example.com") == Basic("bob", "pw:with:colons", "docker config")
    assert found.for_registry("docker.io") == Basic("u-store", "hub-secret", "docker-credential-store")
    assert found.for_registry("quay.io") == Basic("u-store", "quay", "docker-credential-store")
    assert found.for_registry("ghcr.io") is None  # the store has nothing: anonymous
    assert helper_log.read_text().split() == ["us-docker.pkg.dev"]
    assert store_log.read_text().split() == ["https://index.docker.io/v1/", "quay.io", "ghcr.io"]


def test_stub_adc_token_only_for_google_registries(tmp_path: Path) -> None:
    calls: list[int] = []

    def token() -> str:
        calls.append(1)
        return "ya29.adc"

    found = Credentials(tmp_path, helper_path=str(tmp_path), google_token=token)
    adc = Basic("oauth2accesstoken", "ya29.adc", "Application Default Credentials")
    for host in ("us-docker.pkg.dev", "europe-west4-docker.pkg.dev", "gcr.io", "eu.gcr.io"):
        assert found.for_registry(host) == adc
    assert found.for_registry("ghcr.io") is None and found.for_registry("127.0.0.1:5000") is None
    assert len(calls) == 4


def test_stub_docker_config_wins_over_adc_and_a_missing_helper_is_nothing(tmp_path: Path) -> None:
    write_config(
        tmp_path,
        {
            "auths": {"https://gcr.io": {"username": "_json_key", "password": "{}"}},
            "credHelpers": {"us-docker.pkg.dev": "not-installed"},
        },
    )
    found = Credentials(tmp_path, helper_path=str(tmp_path), google_token=lambda: None)
    assert found.for_registry("gcr.io") == Basic("_json_key", "{}", "docker config")
    assert found.for_registry("us-docker.pkg.dev") is None


def test_stub_unreadable_config_is_no_credentials(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text("{not json")
    assert Credentials(tmp_path, helper_path="", google_token=lambda: None).for_registry("ghcr.io") is None


def test_stub_adc_token_is_asked_once_across_threads() -> None:
    calls: list[int] = []

    def slow_lookup() -> str:
        calls.append(1)
        time.sleep(0.05)
        return "ya29.once"

    token = creds.AdcToken(slow_lookup)
    answers: list[str | None] = []
    threads = [threading.Thread(target=lambda: answers.append(token())) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert calls == [1] and answers == ["ya29.once"] * 4


# ------------------------------------------------------------------------------------------ references


@pytest.mark.parametrize(
    ("text", "registry", "repository", "tag", "digest", "url"),
    [
        ("python:3.11-slim", "docker.io", "library/python", "3.11-slim", None,
         "https://registry-1.docker.io/v2/library/python/manifests/3.11-slim"),
        ("docker.io/bitnami/redis:7", "docker.io", "bitnami/redis", "7", None,
         "https://registry-1.docker.io/v2/bitnami/redis/manifests/7"),
        ("index.docker.io/ubuntu:24.04", "docker.io", "library/ubuntu", "24.04", None,
         "https://registry-1.docker.io/v2/library/ubuntu/manifests/24.04"),
        ("us-docker.pkg.dev/cloud-tpu-v2-images/pathways/server:20260730-jax_0.10.2", "us-docker.pkg.dev",
         "cloud-tpu-v2-images/pathways/server", "20260730-jax_0.10.2", None,
         "https://us-docker.pkg.dev/v2/cloud-tpu-v2-images/pathways/server/manifests/20260730-jax_0.10.2"),
        ("127.0.0.1:5000/team/app:v1", "127.0.0.1:5000", "team/app", "v1", None,
         "http://127.0.0.1:5000/v2/team/app/manifests/v1"),
        ("localhost/app:v1", "localhost", "app", "v1", None, "http://localhost/v2/app/manifests/v1"),
        ("myhost:5000/app:v1", "myhost:5000", "app", "v1", None, "https://myhost:5000/v2/app/manifests/v1"),
        (f"gcr.io/p/app:v1@{DIGEST}", "gcr.io", "p/app", "v1", DIGEST, f"https://gcr.io/v2/p/app/manifests/{DIGEST}"),
        (f"ghcr.io/o/app@{DIGEST}", "ghcr.io", "o/app", None, DIGEST, f"https://ghcr.io/v2/o/app/manifests/{DIGEST}"),
        ("team/app", "docker.io", "team/app", None, None, "https://registry-1.docker.io/v2/team/app/manifests/latest"),
    ],
)  # fmt: skip
def test_references_parse_as_docker_reads_them(
    text: str, registry: str, repository: str, tag: str | None, digest: str | None, url: str
) -> None:
    ref = parse_reference(text)
    assert (ref.registry, ref.repository, ref.tag, ref.digest) == (registry, repository, tag, digest)
    assert ref.manifest_url() == url


@pytest.mark.parametrize(
    "text", ["Team/App:v1", "reg.io/app:bad tag", "reg.io/app@sha256:xyz", "reg.io//app:v1", "app:-x", "reg.io/a..b:1"]
)
def test_bad_references_are_refused(text: str) -> None:
    with pytest.raises(BadReference):
        parse_reference(text)


@pytest.mark.parametrize(
    ("digest", "valid"),
    [
        ("sha256:" + "a" * 64, True),
        ("sha512:" + "0" * 128, True),
        ("sha256:" + "a" * 63, False),  # the grammar of old took any 32 hex digits or more
        ("sha256:" + "a" * 65, False),
        ("sha256:" + "A" * 64, False),  # OCI: lower-case hex only
        ("sha512:" + "0" * 64, False),
        ("md5:" + "0" * 32, False),
        ("sha256:" + "a" * 64 + "@evil.example/x", False),
    ],
)
def test_digests_follow_the_oci_rule(digest: str, valid: bool) -> None:
    assert is_digest(digest) is valid
    if valid:
        assert parse_reference(f"reg.io/app@{digest}").digest == digest
    else:
        with pytest.raises(BadReference, match="sha256: and 64 lower-case hex digits, or sha512: and 128"):
            parse_reference(f"reg.io/app@{digest}")
