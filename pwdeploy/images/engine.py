"""The seam to a container engine. ``DockerCli`` drives the docker CLI against whatever engine DOCKER_HOST
(or the current docker context) names; anything with the same methods can stand in for it.

Output is streamed line by line to a ``Progress``; ``BuildLog`` follows the build steps so a failure can name
the failing step and show its log tail.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Protocol

from pwdeploy.errors import BuildError

TAIL_LINES = 20
_LEGACY_STEP = re.compile(r"Step (\d+)/(\d+) : (.*)")
_BUILDKIT_STEP = re.compile(r"#\d+ \[(?:\S+ )?(\d+)/(\d+)\] (.*)")
# docker push prints one line per tag pushed: "TAG: digest: sha256:HEX size: N" (the engine's words: moby
# distribution/push_v2.go, Messagef with ref.Tag()); only the line of the tag pushed is its digest.
_PUSHED_DIGEST = re.compile(r"^(\S+): digest: (sha256:[0-9a-f]{64}) size: \d+\s*$")
_LEGACY_NOTICE = "DEPRECATED: The legacy builder"


@dataclass(frozen=True)
class BuildStep:
    number: int
    total: int
    instruction: str

    def __str__(self) -> str:
        return f"step {self.number}/{self.total}: {self.instruction}"


class Progress(Protocol):
    def step(self, step: BuildStep) -> None: ...

    def line(self, text: str) -> None: ...


@dataclass(frozen=True)
class RunResult:
    returncode: int
    stdout: str
    stderr: str = ""

    @property
    def cannot_run_here(self) -> bool:
        """The engine cannot execute the image at all (another CPU architecture), as opposed to a failing command."""
        return self.returncode != 0 and "exec format error" in self.stderr.lower()


class Engine(Protocol):
    def check(self) -> str: ...

    def image_labels(self, ref: str) -> dict[str, str] | None: ...

    def build(self, context_tar: Path, tag: str, progress: Progress, platform: str) -> str: ...

    def push(self, tag: str, progress: Progress) -> str: ...

    def run(self, ref: str, command: list[str]) -> RunResult: ...

    def remove(self, ref: str) -> None: ...


class BuildLog:
    """Follows build output: the current step and the last lines, for progress and failure reports."""

    def __init__(self, progress: Progress) -> None:
        self.progress = progress
        self.current: BuildStep | None = None
        self.tail: deque[str] = deque(maxlen=TAIL_LINES)
        self._in_notice = False

    def feed(self, line: str) -> None:
        line = line.rstrip("\n")
        # The docker CLI's notice about the legacy builder is about the CLI, not this build.
        if line.startswith(_LEGACY_NOTICE) or (self._in_notice and (line.startswith(" ") or not line)):
            self._in_notice = True
            return
        self._in_notice = False
        if not line.strip():
            return
        match = _LEGACY_STEP.fullmatch(line) or _BUILDKIT_STEP.fullmatch(line)
        if match:
            step = BuildStep(int(match.group(1)), int(match.group(2)), match.group(3).strip())
            if step != self.current:
                self.current = step
                self.tail.clear()
                self.progress.step(step)
                return
        self.tail.append(line)
        self.progress.line(line)

    def failure(self, what: str) -> str:
        where = f" at {self.current}" if self.current else ""
        tail = "\n".join(f"    {line}" for line in self.tail) or "    (no output)"
        return f"{what} failed{where}; last output:\n{tail}"


def tag_of(ref: str) -> str:
    """The tag of an image reference (``latest`` when it names none), as docker push names it in its digest line."""
    name = ref.split("@", 1)[0]
    last = name.rsplit("/", 1)[-1]
    return last.rsplit(":", 1)[1] if ":" in last else "latest"


def pushed_digest(ref: str, lines: Sequence[str]) -> str | None:
    """The digest docker push printed for ``ref``'s tag, from its output lines; None when no line names that tag
    (another tag's line, or a line in another shape, is never taken for it)."""
    tag = tag_of(ref)
    for line in reversed(lines):
        match = _PUSHED_DIGEST.match(line.strip())
        if match and match.group(1) == tag:
            return match.group(2)
    return None


class DockerCli:
    """The docker CLI as a subprocess (argument lists only). ``env`` defaults to this process's environment."""

    def __init__(self, binary: str = "docker", env: Mapping[str, str] | None = None) -> None:
        self.binary = binary
        self.env = dict(os.environ if env is None else env)
        # The classic builder runs on every engine version and needs no network for RUN steps; set
        # DOCKER_BUILDKIT=1 to use BuildKit instead.
        self.env.setdefault("DOCKER_BUILDKIT", "0")

    @property
    def where(self) -> str:
        host = self.env.get("DOCKER_HOST")
        return f"DOCKER_HOST={host}" if host else "the current docker context (DOCKER_HOST is not set)"

    def check(self) -> str:
        """The engine's version; BuildError when the CLI is missing or no engine answers."""
        result = self._run(["version", "--format", "{{.Server.Version}}"], timeout=30)
        if result.returncode != 0 or not result.stdout.strip():
            detail = _first_line(result.stderr) or "no answer"
            raise BuildError(
                f"no Docker engine reachable at {self.where}: {detail}",
                hint="start the engine, or set DOCKER_HOST to one that runs (e.g. unix:///path/to/docker.sock)",
            )
        return result.stdout.strip()

    def image_labels(self, ref: str) -> dict[str, str] | None:
        """The labels of a local image, or None when there is no such image."""
        result = self._run(["image", "inspect", "--format", "{{json .Config.Labels}}", ref], timeout=60)
        if result.returncode != 0:
            if "no such image" in result.stderr.lower():
                return None
            raise BuildError(f"docker image inspect {ref} failed: {_first_line(result.stderr)}")
        labels = json.loads(result.stdout or "null")
        return {str(k): str(v) for k, v in (labels or {}).items()}

    def build(self, context_tar: Path, tag: str, progress: Progress, platform: str) -> str:
        """Build from a tar context for ``platform`` (os/arch) and tag it; the image id. BuildError names the
        failing step."""
        iidfile = context_tar.with_suffix(".iid")
        args = ["build", "--platform", platform, "--iidfile", str(iidfile), "--tag", tag]
        if self.env["DOCKER_BUILDKIT"] != "0":
            args += ["--progress", "plain"]
        log = BuildLog(progress)
        with context_tar.open("rb") as context:
            returncode = self._stream([*args, "-"], log, stdin=context)
        if returncode != 0:
            raise BuildError(log.failure(f"docker build of {tag}"))
        return iidfile.read_text().strip()

    def push(self, tag: str, progress: Progress) -> str:
        """Push a tag; its digest (sha256:...). BuildError with the log tail when the push fails."""
        log = BuildLog(progress)
        returncode = self._stream(["push", tag], log)
        if returncode != 0:
            raise BuildError(
                log.failure(f"docker push of {tag}"),
                hint="check the registry address and your login to it (docker login, gcloud auth configure-docker)",
            )
        digest = pushed_digest(tag, log.tail)
        if digest is None:
            raise BuildError(f"docker push of {tag} succeeded but printed no digest line for tag {tag_of(tag)!r}")
        return digest

    def run(self, ref: str, command: list[str]) -> RunResult:
        """Run ``command`` in a throw-away container of the image, without network."""
        result = self._run(
            ["run", "--rm", "--network", "none", "--entrypoint", command[0], ref, *command[1:]], timeout=300
        )
        return RunResult(result.returncode, result.stdout, result.stderr)

    def remove(self, ref: str) -> None:
        """Untag a local image (the layers stay while other tags use them)."""
        result = self._run(["image", "rm", ref], timeout=60)
        if result.returncode != 0 and "no such image" not in result.stderr.lower():
            raise BuildError(f"docker image rm {ref} failed: {_first_line(result.stderr)}")

    def _run(self, args: list[str], *, timeout: float) -> subprocess.CompletedProcess[str]:
        try:
            return subprocess.run(
                [self.binary, *args], env=self.env, capture_output=True, text=True, timeout=timeout, check=False
            )
        except FileNotFoundError:
            raise self._no_cli() from None
        except subprocess.TimeoutExpired:
            raise BuildError(f"docker {args[0]} did not answer within {timeout:.0f}s ({self.where})") from None

    def _stream(self, args: list[str], log: BuildLog, stdin: IO[bytes] | None = None) -> int:
        try:
            proc = subprocess.Popen(
                [self.binary, *args],
                env=self.env,
                stdin=stdin,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                errors="replace",
            )
        except FileNotFoundError:
            raise self._no_cli() from None
        assert proc.stdout is not None
        with proc:
            for line in proc.stdout:
                log.feed(line)
        return proc.returncode

    def _no_cli(self) -> BuildError:
        return BuildError(
            f"the docker CLI ({self.binary}) is not installed or not on PATH",
            hint="install it (Debian: apt-get install docker.io); it talks to the engine DOCKER_HOST names",
        )


def _first_line(text: str) -> str:
    return next((line.strip() for line in text.splitlines() if line.strip()), "")
