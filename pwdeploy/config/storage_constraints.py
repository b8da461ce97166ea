"""Checks over the storage locations together: the checkpoint location apart from the scratch location. Inside
it (or equal to it), checkpoints share the compile cache's lifecycle (TTL) rule and whatever Pathways does with
its scratch location; preflight reports the same placement as a row (pwdeploy.preflight.gcs_evaluate)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pwdeploy.config.values import GcsPath
from pwdeploy.errors import ConfigError

PLACEMENT_FIELDS = ("storage.checkpoints", "storage.scratch")


def checkpoints_apart_fix(scratch: GcsPath) -> str:
    """Where checkpoints could go instead: beside the scratch location, else another bucket."""
    beside = scratch.beside("checkpoints")
    return f"use a location outside {scratch.uri}, e.g. " + (beside.uri if beside else "a prefix of another bucket")


def checkpoints_apart(parsed: Mapping[str, Any]) -> None:
    checkpoints, scratch = parsed["storage.checkpoints"], parsed["storage.scratch"]
    if checkpoints is None or scratch is None or not checkpoints.within(scratch):
        return
    where = "is the scratch location" if checkpoints == scratch else f"is inside the scratch location {scratch.uri}"
    raise ConfigError(
        "storage.checkpoints",
        f"{checkpoints.uri} {where} (storage.scratch): the compile cache's lifecycle rule there may delete checkpoints",
        hint=checkpoints_apart_fix(scratch) + " (--checkpoint-dir)",
    )
