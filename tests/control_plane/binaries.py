"""Where the control plane's programs and manifests come from: scripts/control-plane.sh builds the binaries at
the versions of scripts/control-plane/versions.env into a cache keyed by them; the CRDs and webhook
configurations are read from the same module versions in the Go module cache."""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "control-plane.sh"
VERSIONS = REPO / "scripts" / "control-plane" / "versions.env"
NO_GO = (
    "Go is not installed: the control-plane tier needs Go >= 1.26 and the Go module proxy (https://go.dev/doc/install)"
)


class BuildError(RuntimeError):
    pass


@functools.cache
def versions() -> dict[str, str]:
    pinned: dict[str, str] = {}
    for line in VERSIONS.read_text().splitlines():
        if line.strip() and not line.lstrip().startswith("#") and "=" in line:
            key, _, value = line.partition("=")
            pinned[key.strip()] = value.strip()
    return pinned


def have_go() -> bool:
    return shutil.which("go") is not None


def built() -> Path | None:
    """The binaries' folder when every one is built, else None (``control-plane.sh dir``)."""
    answer = subprocess.run(["bash", str(SCRIPT), "dir"], capture_output=True, text=True, check=False)
    return Path(answer.stdout.strip()) if answer.returncode == 0 and answer.stdout.strip() else None


def build() -> Path:
    """Build what the cache lacks (instant when everything is cached); BuildError with the script's last lines."""
    answer = subprocess.run(["bash", str(SCRIPT), "build"], capture_output=True, text=True, check=False)
    folder = answer.stdout.strip().splitlines()[-1] if answer.stdout.strip() else ""
    if answer.returncode != 0 or not folder:
        tail = "\n".join(answer.stderr.splitlines()[-20:])
        raise BuildError(f"scripts/control-plane.sh build failed (exit {answer.returncode}):\n{tail}")
    return Path(folder)


@functools.cache
def module_dir(module: str, version: str) -> Path:
    """The module's source in the Go module cache (downloaded when missing). Found without the go command
    where it can be (a go command costs seconds on a busy machine)."""
    cache = os.environ.get("GOMODCACHE") or os.path.join(os.environ.get("GOPATH") or Path.home() / "go", "pkg", "mod")
    folder = Path(cache) / f"{module}@{version}"  # the module paths here have no capital letters to escape
    if (folder / "go.mod").is_file():
        return folder
    env = {**os.environ, "GOFLAGS": "-mod=mod", "GOTOOLCHAIN": "local"}
    answer = subprocess.run(
        ["go", "mod", "download", "-json", f"{module}@{version}"],
        capture_output=True,
        text=True,
        check=False,
        env=env,
        cwd="/",
    )
    try:
        folder = Path(json.loads(answer.stdout)["Dir"])
    except (ValueError, KeyError) as e:
        raise BuildError(f"go mod download {module}@{version} failed: {answer.stderr.strip()[-400:]}") from e
    return folder


def jobset_dir(newest: bool = False) -> Path:
    return module_dir("sigs.k8s.io/jobset", versions()["JOBSET_NEWEST_VERSION" if newest else "JOBSET_VERSION"])


def kueue_dir() -> Path:
    return module_dir("sigs.k8s.io/kueue", versions()["KUEUE_VERSION"])


def kwok_dir() -> Path:
    return module_dir("sigs.k8s.io/kwok", versions()["KWOK_VERSION"])
