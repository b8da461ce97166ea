"""Which flag gives each argument of ``pwdeploy.api``: the one table that turns what the API says to a library
caller (an ``ArgumentError`` naming the argument; a hint such as ``pass `check_program=False` ``) into what a
command-line user reads (the flag: ``--no-check``), as ``config/fields.py`` holds the flag of each job field."""

from __future__ import annotations

import re

from pwdeploy.errors import ArgumentError, ConfigError, PwdeployError

# argument -> the flag that gives it (for a bool argument whose default is True, the flag that turns it off);
# None: a positional argument the message names itself. A flag ending in "=" is written with its value after "="
# (--dry-run=server, as kubectl writes it), any other with a space (--local-port 0).
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
    "dry_run": "--dry-run=",
    "until": "--wait=",
    "wait": "--wait=",
    "output_dir": "--output-dir",
    "kubernetes_version": "--kubernetes-version",
    "region": "--region",
    "check_program": "--no-check",
    "preflight": "--skip-preflight",
    "replace": "--replace",
    "connect": "--connect",
    "local_port": "--local-port",
    "print_env": "--print-env",
    "strict_version": "--strict-version",
    "delete_on_exit": "--delete-on-exit",
    "command": "COMMAND",  # after --
    "duration": "--duration",
    "port": "--port",
    "hosts": "--hosts",
    "lose_slice": "--lose-slice",
    "kill_worker": "--kill-worker",
    "exit_code": "--exit-code",
    "evict_head": "--evict-head",
    "delete_head": "--delete-head",
    "after_step": "--after-step",
    "after": "--after",
    "allow_fatal": "--allow-fatal",
    "evict_at_step": "--evict-at-step",
    "evict_after": "--evict-after",
    "evict_by": "--evict-by",
}
# `argument` or `argument=value` in an error's text: how the API names what the caller can change.
_NAMED = re.compile(r"`([a-z_]+)(?:=([^`]*))?`")


def as_flags(error: PwdeployError) -> PwdeployError:
    """``error`` as the command line says it: an ``ArgumentError`` names the flag of its argument instead, and
    the arguments its message and hint name in backquotes (`local_port=0`) are said as flags (--local-port 0)."""
    if not isinstance(error, ArgumentError) or (error.field is not None and error.field not in FLAG_OF_ARGUMENT):
        return error
    hint = _flags_in(error.hint) if error.hint else None
    source = None if error.field is None else flag_of(error.field)
    return ConfigError(None, _flags_in(error.message), hint=hint, source=source)


def as_said(error: PwdeployError) -> str:
    """The error's text on the command line (``as_flags``); any error's hint, written by pwdeploy, says the
    arguments it names as flags too (``pass `check_program=False` `` -> ``pass --no-check``)."""
    shown = as_flags(error)
    text, hint = str(shown), shown.hint
    if not hint or shown is not error:
        return text
    return text.removesuffix(f"\n  hint: {hint}") + f"\n  hint: {_flags_in(hint)}"


def _flags_in(text: str) -> str:
    return _NAMED.sub(_flag, text)


def flag_of(argument: str) -> str | None:
    """The flag that gives ``argument`` (None: a positional argument, or none)."""
    flag = FLAG_OF_ARGUMENT.get(argument)
    return None if flag is None else flag.rstrip("=")


def _flag(match: re.Match[str]) -> str:
    argument, value = match[1], match[2]
    flag = FLAG_OF_ARGUMENT.get(argument)
    if flag is None:
        return match[0]
    if value is None or value in ("True", "False"):
        return flag.rstrip("=")
    return f"{flag}{value}" if flag.endswith("=") else f"{flag} {value}"
