"""A real GCS JSON API for tests: `gcp-storage-emulator` in a subprocess on 127.0.0.1 and a free port.

Use the fixtures from a test module::

    from tests import gcs_emulator as emulator

    gcs_emulator = emulator.gcs_emulator  # pytest finds fixtures by module attribute
    emulator_env = emulator.emulator_env

``gcs_emulator`` (session) starts one in-memory emulator and stops it at the end; ``emulator_env`` points
STORAGE_EMULATOR_HOST at it for one test. Without the emulator the tests skip with the reason, except in CI
(CI=true), where they fail (tests/services.py).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from tests.services import unavailable

START_SECONDS = 20.0


class GcsEmulator:
    """One emulator process. ``url`` is what STORAGE_EMULATOR_HOST takes."""

    def __init__(self) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._workdir = tempfile.TemporaryDirectory(prefix="gcs-emulator-")
        self._log = open(os.path.join(self._workdir.name, "emulator.log"), "wb")  # noqa: SIM115
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        args = [sys.executable, "-m", "gcp_storage_emulator", "start", "--host", "127.0.0.1",
                "--port", str(self.port), "--in-memory", "--quiet"]  # fmt: skip
        self.process = subprocess.Popen(args, cwd=self._workdir.name, stdout=self._log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + START_SECONDS
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"gcp-storage-emulator exited with {self.process.returncode}: {self.log_tail()}")
            if self.answers():
                return
            time.sleep(0.05)
        tail = self.log_tail()
        self.stop()
        raise RuntimeError(f"gcp-storage-emulator did not answer within {START_SECONDS:.0f}s: {tail}")

    def answers(self) -> bool:
        try:
            with urllib.request.urlopen(self.url + "/", timeout=0.5) as response:
                return bool(response.status == 200)
        except (OSError, urllib.error.URLError):
            return False

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=5)
        self._log.close()
        self._workdir.cleanup()

    def log_tail(self, lines: int = 20) -> str:
        if self._log.closed:
            return "(log removed)"
        self._log.flush()
        with open(self._log.name, "rb") as log:
            return b"\n".join(log.read().splitlines()[-lines:]).decode(errors="replace")

    # -- helpers that act as a bucket's owner would, through the JSON API --------------------------------

    def create_bucket(self, prefix: str = "pwd-test") -> str:
        name = f"{prefix}-{uuid.uuid4().hex[:10]}"
        self._request("POST", "/storage/v1/b?project=test", {"name": name})
        return name

    def patch_bucket(self, name: str, metadata: dict[str, Any]) -> dict[str, Any]:
        return self._request("PATCH", f"/storage/v1/b/{name}", metadata)

    def list_objects(self, bucket: str, prefix: str = "") -> list[str]:
        found = self._request("GET", f"/storage/v1/b/{bucket}/o?prefix={prefix}")
        return [item["name"] for item in found.get("items", [])]

    def _request(self, method: str, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(self.url + path, data=data, method=method)
        request.add_header("Content-Type", "application/json")
        with urllib.request.urlopen(request, timeout=5) as response:
            text = response.read()
        return dict(json.loads(text)) if text else {}


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="session")
def gcs_emulator() -> Iterator[GcsEmulator]:
    try:
        import gcp_storage_emulator  # noqa: F401
    except ImportError:
        unavailable("GCS emulator unavailable: gcp-storage-emulator is not installed (pip install -e .[dev])")
    for attempt in range(3):  # another process may take the free port between picking and binding it
        emulator = GcsEmulator()
        try:
            emulator.start()
            break
        except (RuntimeError, OSError) as exc:
            emulator.stop()
            if attempt == 2:
                unavailable(f"GCS emulator unavailable: {exc}")
    try:
        yield emulator
    finally:
        emulator.stop()


@pytest.fixture
def emulator_env(gcs_emulator: GcsEmulator, monkeypatch: pytest.MonkeyPatch) -> GcsEmulator:
    """STORAGE_EMULATOR_HOST set to the session's emulator for one test."""
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", gcs_emulator.url)
    return gcs_emulator
