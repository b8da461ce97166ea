"""kubectl's conventions that several commands share: ``-o json`` / ``-o yaml`` (one document on stdout, in the
shapes docs/output.md describes), a question that needs a terminal, and shell words that survive ``eval``."""

from __future__ import annotations

import re
import shlex
import sys
from collections.abc import Callable
from typing import Any, TypeVar

import click

from pwdeploy.errors import ConfigError
from pwdeploy.text import unsafe

F = TypeVar("F", bound=Callable[..., Any])
FORMATS = ("text", "json", "yaml")


def output_option(func: F) -> F:
    """``-o/--output text|json|yaml``, as kubectl's ``-o``."""
    return click.option(
        "-o",
        "--output",
        type=click.Choice(FORMATS),
        default="text",
        show_default=True,
        help="Output format: text for people; json or yaml, one document for scripts (shapes: docs/output.md).",
    )(func)


def emit(document: dict[str, Any], output: str) -> None:
    r"""Print ``document`` as JSON or YAML. Both escape control characters (JSON as ``\u001b``; YAML, written
    ASCII-only, in a double-quoted scalar), so text from outside stays data and never reaches the terminal raw."""
    if output == "json":
        import json  # only for -o json: `local run` and `check` print text

        click.echo(json.dumps(document, indent=2))
        return
    import yaml  # only for -o yaml

    class Dumper(yaml.SafeDumper):
        pass

    # A kind of str (a config Quantity) as its text.
    Dumper.add_multi_representer(str, lambda dumper, data: dumper.represent_str(str(data)))
    click.echo(yaml.dump(document, Dumper=Dumper, sort_keys=False, allow_unicode=False, width=2**16), nl=False)


def confirm(question: str, flag: str = "-y", *, terminal_only: bool = False) -> bool:
    """The answer to a yes/no question on stderr. Without a terminal and with nothing piped in, asking cannot work:
    that is a usage error (exit 2) naming ``flag``, not click's "Aborted." with Ctrl-C's exit 130. ``terminal_only``
    (drill): only a person at a terminal answers; piped input is not read (a ``while read`` loop would feed it the
    next line)."""
    if terminal_only and (sys.stdin is None or not sys.stdin.isatty()):
        raise ConfigError(
            None,
            f"cannot ask {question!r}: the input is not a terminal, and only a person at one may answer this",
            hint=f"pass {flag} to answer yes, or run the command in a terminal",
        )
    try:
        return click.confirm(question, default=False, err=True)
    except click.exceptions.Abort:
        if sys.stdin is None or not sys.stdin.isatty():
            raise ConfigError(
                None,
                f"cannot ask {question!r}: the input is not a terminal and gave no answer",
                hint=f"pass {flag} to answer yes, or run the command in a terminal",
            ) from None
        raise


def shell_word(word: str) -> str:
    """``word`` quoted for a POSIX shell; one holding a newline or a character pwdeploy.text would make visible is
    written in ``$'...'`` form (bash, zsh, ksh and POSIX.1-2024 sh), so that it stays on one line and shows no
    control character: a ``# cd ... && COMMAND`` comment printed for ``eval`` then ends where it should, not at a
    newline inside an argument."""
    if "\n" not in word and not unsafe().search(word):
        return shlex.quote(word)
    return "$'" + re.sub(r"[\n\t\\']|" + unsafe().pattern, _ansi_c, word) + "'"


_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t", "\\": "\\\\", "'": "\\'"}


def _ansi_c(match: re.Match[str]) -> str:
    char = match.group()
    code = ord(char)
    return _NAMED.get(char) or (f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}")


def shell_join(words: tuple[str, ...] | list[str]) -> str:
    return " ".join(shell_word(word) for word in words)
