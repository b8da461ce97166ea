"""The config files a job's command gives its program (``python3 -m maxtext.train configs/base.yml key=value``):
settings a rule can read there that the code only takes from its config (MaxText's OCDBT default lives in its YAML
config, ``checkpoint_storage_use_ocdbt: true``). Each file is a ``.yml``/``.yaml`` word of ``main.command`` that
is a file beside the config; ``KEY=VALUE`` (or ``--KEY=VALUE``) words of the command override its keys, as such
trainers read them. Read as text, line by line (a top-level ``key: value``), never imported."""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from pathlib import Path

from pwdeploy.check.rule import Context, Hit

MAX_BYTES = 1 * 2**20
_SETTING = re.compile(r"^([A-Za-z_][A-Za-z0-9_.-]*)\s*:\s*([^#\s][^#]*?)\s*(?:#.*)?$")
_TRUE = frozenset({"true", "yes", "on", "1"})


def given_files(context: Context) -> list[Path]:
    """The YAML files ``main.command`` names that exist beside the config."""
    job = context.job
    if job is None:
        return []
    found = []
    for word in job.main.command[1:]:
        if word.lower().endswith((".yml", ".yaml")) and "=" not in word:
            path = job.base_dir / word
            if path.is_file() and path.stat().st_size <= MAX_BYTES:
                found.append(path)
    return found


def overrides(context: Context) -> dict[str, str]:
    """``KEY=VALUE`` and ``--KEY=VALUE`` words of ``main.command``: the program's own overrides of its config."""
    words = context.job.main.command[1:] if context.job is not None else ()
    pairs = (word.lstrip("-").partition("=") for word in words if "=" in word)
    return {key: value for key, sep, value in pairs if sep and key.isidentifier()}


def settings(path: Path) -> Iterator[tuple[int, str, str]]:
    """(line, key, value) of each top-level ``key: value`` line of a YAML file."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return
    for number, line in enumerate(text.splitlines(), start=1):
        if match := _SETTING.match(line):
            yield number, match.group(1), match.group(2).strip().strip("'\"")


def switched_on(context: Context, suffix: str) -> Iterable[tuple[Path, int, str]]:
    """(file, line, key) of each key ending in ``suffix`` that a given config file turns on and the command does
    not turn off again."""
    given = overrides(context)
    for path in given_files(context):
        for line, key, value in settings(path):
            final = given.get(key, value)
            if key.endswith(suffix) and final.lower() in _TRUE:
                yield path, line, key


def ocdbt_in_configs(context: Context) -> Iterable[Hit]:
    """``*use_ocdbt: true`` in a config file the command gives a program that uses Orbax (``orbax-ocdbt``)."""
    if not any(k.facts.orbax for k in context.of("orbax-ocdbt")):
        return
    for path, line, key in switched_on(context, "use_ocdbt"):
        yield Hit(
            str(path),
            line,
            f"{key}: true in {path.name}, the config main.command gives the program: its checkpoints are written "
            'as OCDBT, and under Pathways persistence "ValueError: OCDBT not supported for Pathways."',
            f"turn it off for Pathways: add {key}=false to main.command (or set {key}: false in {path.name})",
        )
