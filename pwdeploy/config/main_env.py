"""What the user's container may be told, and what pwdeploy keeps to itself: the variables pwdeploy sets (refused
in the env fields), main.env's JAX_PLATFORMS, Secret references (``main.secret_env``: SECRET/KEY), and main's
command (an xpk-style ``export X=Y && python3 ...`` is answered with main.env; a shell's script may not set what
pwdeploy sets). Rows of pwdeploy.config.value_kinds parse these fields with them."""

# No `from __future__ import annotations`, as in pwdeploy.config.value_kinds.
import os
import re
import shlex
from pathlib import Path
from typing import Any

from pwdeploy import names
from pwdeploy.config.fields import Field
from pwdeploy.config.model import SecretRef
from pwdeploy.config.values import check_name, parse_command, parse_env
from pwdeploy.errors import ConfigError
from pwdeploy.identifiers import INSECURE_GRPC_ENV

# The client-proxy shared-memory transfer's variables (pwdeploy.envcontract), set from head.transfer_shm_size.
TRANSFER_ENV = frozenset({"IFRT_PROXY_LARGE_TRANSFER_OPTIMIZATION_DIRECTORY", "IFRT_PROXY_LARGE_TRANSFER_THRESHOLD"})
# Set by pwdeploy in the user's container; users must not override them through main.env.
RESERVED_ENV = frozenset(
    {
        "JAX_PLATFORMS",
        "JAX_BACKEND_TARGET",
        "XCLOUD_ENVIRONMENT",
        "ENABLE_PATHWAYS_PERSISTENCE",
        "PATHWAYS_HEAD",
        "PWDEPLOY_DATA_WORKERS",
        *TRANSFER_ENV,
    }
)

# Pattern text, compiled (and cached by `re`) at its first use: a render whose config does not reach it pays nothing.
# A Secret's data keys, as Kubernetes validates them (IsConfigMapKey): [-._a-zA-Z0-9]+, at most 253 characters.
SECRET_KEY = r"[-._a-zA-Z0-9]+"
SECRET_KEY_MAX = 253


# JAX_PLATFORMS values main.env may give the user's container: the proxy first (pathwaysutils initialises it),
# and the host CPU backend beside it for work kept on the controller (MaxText's RL recipes run proxy,cpu).
MAIN_PLATFORMS = ("proxy", "proxy,cpu")
# Set by pwdeploy in the user's container alone (other components' env fields keep their own rules).
MAIN_RESERVED_ENV = frozenset({"JOBSET_NAME"})


def parse_env_field(field: Field, value: Any, base_dir: Path) -> tuple[tuple[str, str], ...]:
    env = parse_env(value, field.path)
    for name, text in env.items():
        where = f"{field.path}.{name}"
        if field.path == "main.env" and name == "JAX_PLATFORMS":
            check_main_platforms(text, where)
            continue
        if field.path == "main.env" and name in MAIN_RESERVED_ENV:
            raise ConfigError(where, "is set by pwdeploy (the JobSet's name, from its annotation); remove it")
        if field.path in ("main.env", "proxy_env") and name == INSECURE_GRPC_ENV:
            raise ConfigError(
                where,
                "is set by head.insecure_grpc (--insecure-grpc), on the proxy and its client together: one side alone "
                "cannot connect to the other; remove it",
                hint="head.insecure_grpc: true (docs/sessions.md)",
            )
        check_not_reserved(name, where)
    return tuple(sorted(env.items()))


def check_main_platforms(value: str, where: str) -> None:
    if value not in MAIN_PLATFORMS:
        raise ConfigError(
            where,
            f"{value!r}: on Pathways the user's container runs JAX on the proxy backend, so JAX_PLATFORMS is "
            f"{' or '.join(MAIN_PLATFORMS)} (the host CPU backend beside the proxy); pwdeploy sets proxy unless told",
            hint="JAX_PLATFORMS: proxy,cpu for host computation beside the proxy, or leave it to pwdeploy",
        )


def parse_secret_env(field: Field, value: Any, base_dir: Path) -> tuple[SecretRef, ...]:
    refs = []
    for name, ref in sorted(parse_env(value, field.path).items()):
        where = f"{field.path}.{name}"
        secret, _, key = ref.partition("/")
        if not secret or not key:
            raise ConfigError(where, f"{ref!r} is not SECRET/KEY; e.g. --secret-env {name}=my-secret/token")
        check_name(secret, where, names.dns1123_subdomain)
        if len(key) > SECRET_KEY_MAX or not re.fullmatch(SECRET_KEY, key):
            raise ConfigError(
                where,
                f"{key!r} is not a Secret key (letters, digits, '-', '_', '.'; at most {SECRET_KEY_MAX} characters), "
                f"e.g. --secret-env {name}=my-secret/token",
            )
        check_not_reserved(name, where)
        refs.append(SecretRef(name, secret, key))
    return tuple(refs)


def check_not_reserved(name: str, where: str) -> None:
    if name in TRANSFER_ENV:
        raise ConfigError(
            where,
            "is set by pwdeploy (the client-proxy shared-memory transfer); remove it from the config",
            hint="size or turn off that transfer with head.transfer_shm_size (--transfer-shm-size; 0: off)",
        )
    if name in RESERVED_ENV or name.startswith("PWDEPLOY_"):
        raise ConfigError(where, "is set by pwdeploy; remove it from the config")


_NAME = r"[A-Za-z_][A-Za-z0-9_]*"
_ASSIGNMENT = _NAME + r"=(?:'[^']*'|\"[^\"]*\"|[^\s;&|'\"]*)"
# Pattern text (compiled at first use, as above): exports before the command, and an assignment prefix.
_EXPORTS = rf"\s*(?:export\s+)?((?:{_ASSIGNMENT}\s+)*{_ASSIGNMENT})\s*(?:&&|;)\s*"
_PREFIX = rf"\s*((?:{_ASSIGNMENT}\s+)+)(?=[^\s=]+(?:\s|$))"
SHELLS = frozenset({"bash", "sh", "dash", "zsh", "ksh"})


def parse_main_command(field: Field, value: Any) -> tuple[str, ...]:
    """``main.command``'s words: an xpk-style ``export X=Y && python3 ...`` (or ``X=Y python3 ...``) is answered
    with ``main.env``, and a shell's script (``bash -c "..."``) may not set what pwdeploy sets."""
    if isinstance(value, str) and "=" in value and (found := exported(value)) is not None:  # no "=": no regex
        assignments, rest = found
        env = ", ".join(f"{name}: {text}" for name, text in assignments.items())
        raise ConfigError(
            field.path,
            f"{value!r} sets {', '.join(assignments)} in a shell, but the command runs without one",
            hint=f"set them in main.env ({env}; --env NAME=VALUE) and make the command {rest!r}",
        )
    words = parse_command(value, field.path)
    if os.path.basename(words[0]) in SHELLS and "-c" in words[1:-1]:
        check_script(words[words.index("-c", 1) + 1], field.path)
    return words


def exported(text: str) -> tuple[dict[str, str], str] | None:
    """The variables ``export A=1 B=2 && C=3; cmd ...`` or ``A=1 cmd ...`` sets before its command, and the command
    (None when it sets none)."""
    assignments: dict[str, str] = {}
    rest = text.strip()
    while match := re.match(_EXPORTS, rest):
        assignments |= _assigned(match.group(1))
        rest = rest[match.end() :]
    if not assignments and (match := re.match(_PREFIX, rest)):
        assignments, rest = _assigned(match.group(1)), rest[match.end() :]
    return (assignments, rest.strip()) if assignments and rest.strip() else None


def _assigned(text: str) -> dict[str, str]:
    pairs = (word.partition("=") for word in shlex.split(text))
    return {name: value for name, _, value in pairs}


def check_script(script: str, path: str) -> None:
    """A shell's script (``bash -c "export JAX_PLATFORMS=cpu && python3 ..."``) that sets a variable pwdeploy
    sets in the user's container: refused as main.env refuses it, or the shell would override it unseen."""
    for match in re.finditer(rf"(?:^|[\s;&|(])(?:export\s+|env\s+)?({_NAME})=", script):
        name = match.group(1)
        if name in RESERVED_ENV or name in MAIN_RESERVED_ENV or name.startswith("PWDEPLOY_"):
            fix = "set JAX_PLATFORMS in main.env (proxy or proxy,cpu)" if name == "JAX_PLATFORMS" else "remove it"
            raise ConfigError(
                path,
                f"its shell script sets {name}, which pwdeploy sets in the user's container: the script would "
                "override it where no check sees it",
                hint=f"{fix}; set other variables in main.env rather than in the script",
            )
