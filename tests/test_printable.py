"""The one printable-text rule (pwdeploy/text.py) for text from outside: planted terminal sequences (ESC[2J, OSC 52,
OSC 8, a title change, NUL, C1, bidi) never reach the terminal raw, a cut never leaves half an escape, and
credential-looking values are masked in quoted evidence. The commands are run piped (CliRunner) and on a
pseudo-terminal, since click strips some sequences only when its output is not a terminal."""

from __future__ import annotations

import os
import pty
import re
import select
import subprocess
import sys
from pathlib import Path

import pytest

from pwdeploy import advice, text
from pwdeploy.finding import Finding
from tests.conftest import REPO, ClusterCli
from tests.diagnose_cases import load, serve
from tests.kube_answers import status_body
from tests.kube_stub import StubKubeApiServer

PLANTED = {
    "clear screen": "\x1b[2J",
    "OSC 52 clipboard write": "\x1b]52;c;cm0gLXJmIH4=\x07",
    "OSC 8 hyperlink": "\x1b]8;;https://evil.example/\x1b\\click\x1b]8;;\x1b\\",
    "title change": "\x1b]0;owned\x07",
    "NUL": "a\x00b",
    "C1 CSI": "\x9b2J",
    "C1 OSC": "\x9d0;owned\x9c",
    "bidi override": "\u202eexe.txt",
    "bidi isolate": "\u2066x\u2069",
    "DEL and BEL": "\x7f\x07",
}
# Nothing a terminal acts on: C0 but tab/newline, DEL, C1, bidi embeddings/overrides/isolates and marks.
RAW = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")
HF_TOKEN = "hf_" + "aBcDeFgHiJkLmNoPqRsTuVwXyZ012345"
BEARER = "eyJhbGciOiJSUzI1NiJ9.payload.signature"


@pytest.mark.parametrize("name", sorted(PLANTED))
def test_each_planted_sequence_is_made_visible(name: str) -> None:
    shown = text.printable(f"before {PLANTED[name]} after")
    assert not RAW.search(shown), repr(shown)
    assert shown.startswith("before ") and shown.endswith(" after")


def test_controls_read_as_kubectl_shows_them() -> None:
    assert text.printable("\x1b[2J") == "^[[2J"  # kubectl's EscapeTerminal: ESC is ^[
    assert text.printable("a\rb") == "a\\rb"  # ... and CR is \r
    assert text.printable("\x00\x07\x7f") == "^@^G^?"
    assert text.printable("\x9b\u202e") == "\\x9b\\u202e"
    assert text.printable("tab\tand\nnewline") == "tab\tand\nnewline"
    assert text.printable("tab\tand\nnewline", one_line=True) == "tab and newline"
    assert text.printable("ünïcødé and 日本語") == "ünïcødé and 日本語"


@pytest.mark.parametrize("limit", range(3, 40))
def test_a_cut_never_leaves_half_an_escape(limit: int) -> None:
    planted = "status: " + PLANTED["OSC 52 clipboard write"] + PLANTED["bidi override"] + " and more text"
    shown = text.printable(planted, limit)
    assert len(shown) <= limit and not RAW.search(shown)
    whole = text.printable(planted)
    assert shown.endswith("...") and whole.startswith(shown[:-3])
    body = shown[:-3]
    rest = whole[len(body) :]
    # the cut is never between the two characters of ^[ nor inside \u202e / \x9b
    assert not body.endswith("^") or not rest.startswith("[")
    assert not re.search(r"\\(u[0-9a-f]{0,3}|x[0-9a-f]?)$", body)


def test_a_finding_line_cut_inside_an_osc_sequence_keeps_no_part_of_it() -> None:
    finding = Finding("crash", "error", "head pod p", "x" * 5 + "\x1b]0;title\x07" + "y" * 50, "fix it")
    line = finding.line(36)  # "head pod p: error crash: xxxxx" is 30 characters: the cut falls in the OSC
    assert line.endswith("...") and "\x1b" not in line and "\x07" not in line and len(line) <= 36


def test_credential_looking_values_are_masked() -> None:
    said = text.masked(
        f"HF_TOKEN={HF_TOKEN} Authorization: Bearer {BEARER} db_password: hunter2 "
        'https://user:pa55@example.com/x {"api_key": "k-123"} token ' + HF_TOKEN
    )
    for secret in (HF_TOKEN, BEARER, "hunter2", "pa55", "k-123"):
        assert secret not in said
    assert "HF_TOKEN=***" in said and "Authorization: Bearer ***" in said and "db_password: ***" in said
    assert text.masked("step 12 loss=0.31 lr=3e-4") == "step 12 loss=0.31 lr=3e-4"


# The one masker's table: (what a server, a log or a plugin said, the secret that must go, what must stay).
JWT = "eyJhbGciOiJSUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.c2lnbmF0dXJlLXBhcnQ"
REFRESH = "1//0gLm3xQ9vZ2kYCgYIARAAGBASNwF-L9IrqW2bT"
MASKS = [
    (f"HF_TOKEN={HF_TOKEN}", HF_TOKEN, "HF_TOKEN=***"),
    ('"db_password": "hunter2"', "hunter2", '"db_password": "***"'),
    ("token: t0psecret", "t0psecret", "token: ***"),
    (f"Authorization: Bearer {BEARER}", BEARER, "Authorization: Bearer ***"),
    ("proxy-authorization=Basic dXNlcjpwYXNz", "dXNlcjpwYXNz", "proxy-authorization=Basic ***"),
    ("got Bearer abc.def back", "abc.def", "got Bearer *** back"),
    ("basic dXNlcjpwYXNzd29yZA==", "dXNlcjpwYXNzd29yZA==", "basic ***"),
    ("https://me:pw@host/x", "me:pw", "https://***@host/x"),
    (f"the token {JWT} expired", "eyJzdWIiOiIxMjM0NTY3ODkwIn0", "the token *** expired"),  # a bare JWT
    (f"refresh_token {REFRESH} revoked", "0gLm3xQ9vZ2kYCgYIARAAGBASNwF", "refresh_token *** revoked"),
    (f"gcloud said {REFRESH}", REFRESH, "gcloud said ***"),  # a bare Google refresh token
    ("ya29.a0AfB_byC-token_value", "a0AfB_byC", "***"),
    ("key AKIAIOSFODNN7EXAMPLE", "AKIAIOSFODNN7EXAMPLE", "key ***"),
    ("ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2", "A1b2C3d4E5f6G7h8I9j0", "***"),
    ("sk-" + "proj-abcdefghijklmnopqrstu", "abcdefghijklmnopqrstu", "***"),
    ("AIza" + "SyA1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q", "SyA1b2C3d4E5f6G7h8I9j0", "***"),
    ("opaque Zx9Qw8Er7Ty6Ui5Op4As3Df2Gh1Jk0LmNb here", "Zx9Qw8Er7Ty6Ui5Op4As3Df2Gh1Jk0LmNb", "opaque *** here"),
]
KEPT = [
    "step 12 loss=0.31 lr=3e-4",
    "MONKEY_COUNT=12 keyboard layout",
    "basic auth failed for the registry",
    "/usr/lib/google-cloud-sdk/bin/gke-gcloud-auth-plugin",
    "image us-docker.pkg.dev/proj/repo/train@sha256:" + "ab12" * 16,
    "pod train-worker-0-0-x7k2p: 0/4 nodes are available: 4 Insufficient google.com/tpu",
    "1/1 ready, ratio 1//2 in the docs",
]


@pytest.mark.parametrize(("said", "secret", "shown"), MASKS, ids=[row[2] for row in MASKS])
def test_the_one_masker_hides_each_kind_of_secret(said: str, secret: str, shown: str) -> None:
    assert secret in said and secret not in text.masked(said)
    assert text.masked(said) == shown


@pytest.mark.parametrize("said", KEPT)
def test_the_one_masker_keeps_what_is_not_a_secret(said: str) -> None:
    assert text.masked(said) == said


def test_credential_plugins_quote_through_the_one_masker() -> None:
    from pwdeploy.kube import credential_plugin, plugin_run

    assert vars(plugin_run)["masked"] is text.masked  # the plugin's stderr is quoted there
    assert not hasattr(credential_plugin, "mask_secrets") and not hasattr(plugin_run, "mask_secrets")


def test_render_warnings_and_quoted_evidence_share_one_credential_rule() -> None:
    assert advice.looks_like_credential is text.looks_like_credential
    assert text.looks_like_credential("WANDB_API_KEY") and not text.looks_like_credential("MONKEY_COUNT")


# ---------------------------------------------------------------------------------------------- the commands

HOSTILE_LOG = "\n".join(
    [*(f"{name}: {seq}" for name, seq in PLANTED.items()), f"HF_TOKEN={HF_TOKEN}", f"Authorization: Bearer {BEARER}"]
)
HOSTILE_MESSAGE = "".join(PLANTED.values()) + " HF_TOKEN=" + HF_TOKEN + " " + "\x1b]8;;https://x/\x1b\\" * 30


def hostile(stub: StubKubeApiServer) -> None:
    """A crashed job whose log, termination message and events plant every sequence and two credentials."""
    fixture = load("crash")
    fixture["logs"][0]["text"] = HOSTILE_LOG
    status = fixture["pods"]["head"]["status"]
    ready = {"type": "Ready", "status": "False", "reason": "\x1b]0;t\x07", "message": HOSTILE_MESSAGE}
    status["conditions"].append(ready)
    status["containerStatuses"][0]["state"]["terminated"]["reason"] = "Error\x1b[2J"
    fixture["events"] = [{"for": "head", "type": "Warning", "reason": "BackOff", "message": HOSTILE_MESSAGE}]
    serve(stub, fixture)


def assert_clean(output: str) -> None:
    assert not RAW.search(output.replace("\r\n", "\n")), repr(RAW.findall(output))
    assert HF_TOKEN not in output and BEARER not in output


@pytest.mark.parametrize("command", ["status", "diagnose"])
def test_planted_sequences_never_reach_a_pipe_against_the_stub(
    command: str, stub: StubKubeApiServer, cluster_cli: ClusterCli, kc: list[str]
) -> None:
    hostile(stub)
    result = cluster_cli([command, "dp-example", *kc])
    assert result.exit_code in (0, 10), result.output
    assert_clean(result.stdout + result.stderr)
    assert "^[" in result.stdout  # made visible, not dropped: the user sees something was there


def test_diagnose_json_masks_credentials_against_the_stub(
    stub: StubKubeApiServer, cluster_cli: ClusterCli, kc: list[str]
) -> None:
    hostile(stub)
    result = cluster_cli(["diagnose", "dp-example", *kc, "-o", "json"])
    assert result.exit_code == 10 and HF_TOKEN not in result.stdout and BEARER not in result.stdout
    assert "HF_TOKEN=***" in result.stdout


def on_a_terminal(args: list[str], timeout: float = 60.0) -> str:
    """What ``pwdeploy ARGS`` writes to a pseudo-terminal (stdout and stderr both), read until it exits."""
    primary, secondary = pty.openpty()
    env = {**os.environ, "PYTHONPATH": str(REPO), "TERM": "xterm-256color", "COLUMNS": "200"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "pwdeploy", *args], stdin=secondary, stdout=secondary, stderr=secondary, env=env
    )
    os.close(secondary)
    chunks: list[bytes] = []
    try:
        while True:
            ready, _, _ = select.select([primary], [], [], timeout)
            if not ready:
                break
            try:
                chunk = os.read(primary, 65536)
            except OSError:  # EIO: the terminal's other side closed
                break
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        os.close(primary)
        proc.wait(timeout=timeout)
    return b"".join(chunks).decode("utf-8", "replace")


@pytest.mark.parametrize("command", ["status", "diagnose"])
def test_planted_sequences_never_reach_a_terminal_against_the_stub(
    command: str, stub: StubKubeApiServer, kubeconfig: Path
) -> None:
    hostile(stub)
    output = on_a_terminal([command, "dp-example", "--kubeconfig", str(kubeconfig)])
    assert "dp-example" in output, output
    assert_clean(output)


def test_connect_notes_quoting_the_error_channel_are_printable() -> None:
    """connect tells each stream's note (the API server's error-channel text among them) through one function."""
    from pwdeploy.session.attach import _printable

    heard: list[str] = []
    _printable(heard.append)(
        "connection 1: the API server reported: " + PLANTED["OSC 52 clipboard write"] + PLANTED["bidi override"]
    )
    [said] = heard
    assert said.startswith("connection 1: the API server reported: ^[]52;c;") and not RAW.search(said)


def test_every_error_line_is_printable_against_the_stub(
    stub: StubKubeApiServer, cluster_cli: ClusterCli, kc: list[str]
) -> None:
    """An error quoting a server's text (here a Status message) reaches stderr through the rule, once printed."""
    message = "no \x1b]0;owned\x07 access \u202e\x9b2J"
    stub.answer("GET", "/jobsets/dp-example$", status_body(403, "Forbidden", message), status=403)
    result = cluster_cli(["status", "dp-example", *kc])
    assert result.exit_code != 0 and "error:" in result.stderr
    assert not RAW.search(result.stderr), repr(result.stderr)
