"""Which flag gives each argument of ``pwdeploy.api``: the one table that turns an ``ArgumentError`` (naming the
argument, as a library caller wrote it) into the line a command-line user reads (naming the flag), as
``config/fields.py`` holds the flag of each job field."""

from __future__ import annotations

from pwdeploy.errors import ArgumentError, ConfigError, PwdeployError

# argument -> the flag (or the positional argument) that gives it; None: a positional the message names itself.
FLAG_OF_ARGUMENT: dict[str, str | None] = {
    "name": None,  # NAME: the message quotes it
    "namespace": "--namespace",
    "kubeconfig": "--kubeconfig",
    "context": "--context",
    "slice_index": "--slice",
    "host": "--host",
    "component": "--component",
    "tail": "--tail",
    "timeout": "--timeout",
    "dry_run": "--dry-run",
    "until": "--wait",
    "output_dir": "--output-dir",
    "kubernetes_version": "--kubernetes-version",
}


def as_flags(error: PwdeployError) -> PwdeployError:
    """``error`` as the command line says it: an ``ArgumentError`` names the flag of its argument instead."""
    if not isinstance(error, ArgumentError) or error.field not in FLAG_OF_ARGUMENT:
        return error
    return ConfigError(None, error.message, hint=error.hint, source=FLAG_OF_ARGUMENT[error.field])
