"""The colocated-Python sidecar's config constraints: its shared memory fits in the worker's memory, and it runs the
same Python as the job's client.

pathwaysutils' colocated Python pickles functions in the client and runs them in the sidecar, so both must run
the same Python minor version; the published sidecar bases are tagged ``<date>-python_X.Y-jax_V``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from pwdeploy.errors import ConfigError
from pwdeploy.quantity import amount

SHM_FIELDS = ("sidecar.image", "sidecar.repository", "sidecar.shm_size", "tpu.shm_size", "tpu.worker_memory")
# The fields that can name a Python, in the order the message compares them to the first one found.
NAMING_PYTHON = ("sidecar.base_image", "sidecar.python_version", "image.base", "sidecar.image")
PYTHON_FIELDS = ("sidecar.repository", *NAMING_PYTHON)
# Pattern text, compiled (and cached by `re`) at its first use: a render whose config does not reach it pays nothing.
_SIDECAR_TAG = r":(?:.*[-_])?python_([0-9]+\.[0-9]+)-jax_[0-9.]+(?:[-_][^@]*)?(?:@.*)?$"
_OFFICIAL_PYTHON = r"(?:docker\.io/)?(?:library/)?python:([0-9]+\.[0-9]+)\b.*"


def enabled(parsed: Mapping[str, Any]) -> bool:
    return parsed["sidecar.image"] is not None or parsed["sidecar.repository"] is not None


def sidecar_shm(parsed: Mapping[str, Any]) -> None:
    """Both memory-backed directories pathways-worker mounts (/dev/shm and the sidecar's) count against its limit."""
    limit_text, shm_text, sidecar_text = parsed["tpu.worker_memory"], parsed["tpu.shm_size"], parsed["sidecar.shm_size"]
    if not enabled(parsed) or limit_text is None:
        return
    limit = amount(limit_text, "tpu.worker_memory")
    shm = amount(shm_text, "tpu.shm_size")
    if shm >= limit:
        return  # /dev/shm alone does not fit: that check says so
    if shm + amount(sidecar_text, "sidecar.shm_size") >= limit:
        raise ConfigError(
            "sidecar.shm_size",
            f"{sidecar_text} together with tpu.shm_size ({shm_text}) does not fit inside tpu.worker_memory "
            f"({limit_text}): both directories are memory-backed and count against pathways-worker's memory limit",
            hint="lower --sidecar-shm-size or --worker-shm-size, or raise --worker-memory",
        )


def same_python(parsed: Mapping[str, Any]) -> None:
    """Every field that names a Python for the sidecar or for the job's client names the same one."""
    if not enabled(parsed):
        return
    named = [(field, python) for field in NAMING_PYTHON if (python := _python(parsed, field))]
    for field, python in named[1:]:
        first, first_python = named[0]
        if python != first_python:
            raise ConfigError(
                field,
                f"names Python {python}, but {first} names Python {first_python}; the sidecar's Python must equal "
                "the job image's (colocated Python runs the client's pickled functions in the sidecar)",
                hint=f"make {first} and {field} name the same Python X.Y (the sidecar bases are tagged "
                "<date>-python_X.Y-jax_V)",
            )


def _python(parsed: Mapping[str, Any], field: str) -> str | None:
    value = parsed[field]
    if value is None:
        return None
    if field == "sidecar.python_version":
        return str(value)
    found = re.fullmatch(_OFFICIAL_PYTHON, value) if field == "image.base" else re.search(_SIDECAR_TAG, value)
    return found.group(1) if found else None
