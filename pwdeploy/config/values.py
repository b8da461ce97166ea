"""Parsers for single config values: each checks one value and names its field in the error."""

# No `from __future__ import annotations`: typing.NamedTuple compiles each string annotation into a ForwardRef
# (tens of microseconds a field), which evaluated annotations skip; as in pwdeploy.config.model.
import re
import shlex
from collections.abc import Callable
from typing import Any, NamedTuple

from pwdeploy.errors import ConfigError
from pwdeploy.imageref import BadReference, parse_reference

ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]*")
FLAG_ITEM = re.compile(r"--([A-Za-z][A-Za-z0-9_]*)(?:=(\S+))?")
GCS_URI = re.compile(r"gs://([a-z0-9][a-z0-9._-]{1,220}[a-z0-9])(/[^\s]*)?")


class GcsPath(NamedTuple):
    bucket: str
    prefix: str  # without leading or trailing slash; "" for the bucket root

    @property
    def uri(self) -> str:
        return f"gs://{self.bucket}/{self.prefix}" if self.prefix else f"gs://{self.bucket}"

    def child(self, name: str) -> "GcsPath":
        return GcsPath(self.bucket, f"{self.prefix}/{name}" if self.prefix else name)

    def within(self, outer: "GcsPath") -> bool:
        """Whether this location is ``outer`` or inside it."""
        if self.bucket != outer.bucket:
            return False
        return not outer.prefix or self.prefix == outer.prefix or self.prefix.startswith(outer.prefix + "/")

    def beside(self, name: str) -> "GcsPath | None":
        """``name`` next to this location (in its parent), or None when that is inside it (the bucket root)."""
        parent = self.prefix.rpartition("/")[0]
        found = GcsPath(self.bucket, f"{parent}/{name}" if parent else name)
        return None if not self.prefix or found.within(self) else found


def key_values(value: Any, path: str, example: str) -> Any:
    """A mapping from KEY=VALUE items (repeated flags give a list); the same key twice with different values is
    refused (one of them would be dropped without a word). Anything but a list is returned as it is."""
    if not isinstance(value, (list, tuple)):
        return value
    found: dict[str, str] = {}
    for item in value:
        if not isinstance(item, str) or "=" not in item:
            raise ConfigError(path, f"{item!r} is not KEY=VALUE; e.g. {example}")
        key, _, given = (part.strip() for part in item.partition("="))
        if key in found and found[key] != given:
            raise ConfigError(
                f"{path}.{key}", f"is given twice, as {found[key]!r} and {given!r}; give it once, with the value meant"
            )
        found[key] = given
    return found


def parse_int(value: Any, path: str, minimum: int | None) -> int:
    if isinstance(value, bool):
        raise ConfigError(path, f"must be an integer, not {value!r}")
    try:
        number = int(str(value).strip()) if not isinstance(value, int) else value
    except ValueError:
        raise ConfigError(path, f"must be an integer, not {value!r}") from None
    if isinstance(value, float) or (minimum is not None and number < minimum):
        raise ConfigError(path, f"must be an integer >= {minimum if minimum is not None else 0}, not {value!r}")
    return number


def parse_bool(value: Any, path: str) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("true", "1", "yes", "on"):
        return True
    if text in ("false", "0", "no", "off"):
        return False
    raise ConfigError(path, f"must be true or false, not {value!r}")


# execve(2) copies each word of a new program's command line and each NAME=value of its environment as a C
# string: a NUL ends it, and one longer than MAX_ARG_STRLEN (32 pages: 131072 bytes, linux include/uapi/linux/
# binfmts.h) is refused with E2BIG. The container's runtime execs the command with its environment, as local run
# does: either would fail to start.
MAX_ARG_BYTES = 131072


def check_exec_string(text: str, path: str, what: str) -> None:
    """ConfigError naming ``path`` when no process could be given ``text`` as one word or variable."""
    if "\0" in text:
        raise ConfigError(
            path,
            f"{what} holds a NUL character, which no program can be given (execve passes C strings: a NUL ends one)",
            hint="remove the NUL; pass binary data in a file",
        )
    size = len(text.encode("utf-8", "surrogateescape"))
    if size > MAX_ARG_BYTES:
        raise ConfigError(
            path,
            f"{what} is {size} bytes; the kernel passes at most {MAX_ARG_BYTES} bytes per word or variable "
            "(MAX_ARG_STRLEN): the container would not start (E2BIG)",
            hint="pass large data in a file (the image, a volume, GCS), not in the command line or environment",
        )


def parse_command(value: Any, path: str) -> tuple[str, ...]:
    """The command's words. A string is split as a shell splits words (quotes, backslashes) but never run by a
    shell, in the pod as in `local run` (docs/config.md#the-command-runs-without-a-shell): shell syntax in it is
    refused rather than passed on as words. A list is the argv exactly."""
    if isinstance(value, str):
        words = _split_command(value, path)
    elif isinstance(value, list) and all(isinstance(w, (str, int, float)) for w in value):
        words = [str(w) for w in value]
    else:
        raise ConfigError(path, f"must be a string or a list of strings, not a {kind_name(value)}")
    if not words:
        raise ConfigError(path, "must not be empty")
    for index, word in enumerate(words):
        check_exec_string(word, path, f"word {index + 1}")
    return tuple(words)


def _split_command(value: str, path: str) -> list[str]:
    """A command given as one string, split as a shell splits words; shell syntax and several lines refused."""
    if len(value) > MAX_ARG_BYTES:  # shlex builds each word a character at a time: quadratic in its length
        raise ConfigError(
            path,
            f"is {len(value)} characters as one string, more than {MAX_ARG_BYTES}, the longest word the kernel "
            "passes to a program (MAX_ARG_STRLEN)",
            hint="give the command as a list of words, or run it from a script (command: bash run.sh)",
        )
    text = value.replace("\\\n", " ").strip()  # a shell's line continuation is a space between words
    if "\n" in text:
        raise ConfigError(
            path,
            f"is {text.count(chr(10)) + 1} lines, but a command is one line (a `command: |` block would run as "
            "one command whose words are all the lines)",
            hint='run several commands from a script (command: bash run.sh) or a shell: command: [bash, -c, "..."]',
        )
    syntax = shell_syntax(text)
    if syntax is not None:
        raise ConfigError(
            path,
            f"{value!r} uses shell syntax ({syntax}), but the command runs without a shell: that would be "
            "passed to the program as words",
            hint=f"run it through a shell explicitly: command: [bash, -c, {text!r}]",
        )
    try:
        return shlex.split(text)
    except ValueError as exc:
        raise ConfigError(path, f"cannot split {value!r} like a shell: {exc}") from None


_OPERATORS = "|&;<>()"


def shell_syntax(text: str) -> str | None:
    """What in ``text`` a shell would read as syntax rather than as a word: an unquoted operator (``|``, ``&&``,
    ``;``, ``>``, ...), a ``$VAR``, ``$(...)`` or backquote substitution outside single quotes, a leading ``~``;
    None when there is none. Quotes and backslashes are read as a POSIX shell reads them."""
    quote = ""
    start_of_word = True
    i = 0
    while i < len(text):
        char = text[i]
        if quote == "'":
            quote = "" if char == "'" else quote
        elif char == "\\":
            i += 1  # the next character is a word character (inside double quotes as well, near enough)
        elif char == "$" and i + 1 < len(text) and (text[i + 1] in "({_" or text[i + 1].isalnum()):
            return f"the substitution {text[i : i + 2]}..."
        elif char == "`":
            return "a `...` substitution"
        elif quote == '"':
            quote = "" if char == '"' else quote
        elif char in "'\"":
            quote = char
        elif char in _OPERATORS:
            end = i
            while end < len(text) and text[end] in _OPERATORS:
                end += 1
            return f"the operator {text[i:end]!r}"
        elif char == "~" and start_of_word:
            return "a ~ for the home folder"
        start_of_word = char.isspace()
        i += 1
    return None


def parse_str_list(value: Any, path: str) -> tuple[str, ...]:
    if isinstance(value, str):
        return (value,)
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, (str, int, float)) for v in value):
        raise ConfigError(path, f"must be a list of strings, not a {kind_name(value)}")
    return tuple(str(v) for v in value)


def parse_flags(value: Any, path: str) -> list[str]:
    items = parse_str_list(value, path)
    for item in items:
        if not FLAG_ITEM.fullmatch(item):
            raise ConfigError(
                path,
                f"{item!r} is not a flag; write each as --name=value (one flag per item, no spaces), "
                "e.g. --xla_tpu_enable_async_collective_fusion=true",
            )
    return merge_flags([], list(items))


def merge_flags(base: list[str], extra: list[str]) -> list[str]:
    by_name = {item.split("=", 1)[0]: item for item in base}
    for item in extra:
        by_name[item.split("=", 1)[0]] = item
    return list(by_name.values())


def parse_env(value: Any, path: str) -> dict[str, str]:
    if isinstance(value, (list, tuple)):  # KEY=VALUE items, as --env gives them (values kept as given)
        env: dict[str, str] = {}
        for item in value:
            if not isinstance(item, str) or "=" not in item:
                raise ConfigError(path, f"{item!r} is not KEY=VALUE")
            key, _, val = item.partition("=")
            if key in env and env[key] != val:
                raise ConfigError(
                    f"{path}.{key}", f"is given twice, as {env[key]!r} and {val!r}; give it once, with the value meant"
                )
            env[key] = val
        value = env
    if not isinstance(value, dict):
        raise ConfigError(path, f"must be a mapping of NAME: value, not a {kind_name(value)}")
    result: dict[str, str] = {}
    for key, val in value.items():
        if not isinstance(key, str) or not ENV_NAME.fullmatch(key):
            raise ConfigError(f"{path}.{key}", "is not a valid environment variable name")
        if isinstance(val, (dict, list)) or val is None:
            raise ConfigError(f"{path}.{key}", f"must be a string, not a {kind_name(val)}")
        result[key] = str(val).lower() if isinstance(val, bool) else str(val)
        check_exec_string(f"{key}={result[key]}", f"{path}.{key}", "the variable (NAME=value)")
    return result


def parse_gcs(value: Any, path: str) -> GcsPath:
    text = str(value).strip() if isinstance(value, str) else None
    match = GCS_URI.fullmatch(text) if text else None
    if text is None or match is None or ".." in match.group(1):
        raise ConfigError(
            path, f"{value!r} is not a GCS location; use gs://bucket[/prefix] (bucket: 3-222 of a-z 0-9 . _ -)"
        )
    prefix = (match.group(2) or "")[1:].rstrip("/")
    if "//" in (match.group(2) or ""):
        raise ConfigError(path, f"{value!r} has an empty path segment ('//')")
    bucket = match.group(1)
    if max(map(len, bucket.split("."))) > 63 or bucket.startswith("goog") or re.fullmatch(r"[0-9.]+", bucket):
        raise ConfigError(
            path,
            f"{value!r}: a bucket name has at most 63 characters between dots, does not start with 'goog' "
            "and is not an IP address",
        )
    if any(ord(char) < 32 or 127 <= ord(char) <= 159 for char in prefix):
        raise ConfigError(path, f"{value!r} has a control character in its path")
    return GcsPath(bucket, prefix)


def parse_image(value: Any, path: str) -> str:
    """An image reference as the OCI distribution grammar defines it (``registry/repo:tag`` or ``@sha256:...``)."""
    if not isinstance(value, str):
        raise ConfigError(path, f"must be an image reference string, not a {kind_name(value)}")
    text = value.strip()
    try:
        parse_reference(text)
    except BadReference as exc:
        raise ConfigError(
            path,
            f"{value!r} is not an image reference ({exc}); write [REGISTRY/]REPOSITORY[:TAG][@sha256:DIGEST] "
            "(lower-case repository, no spaces), e.g. us-docker.pkg.dev/my-project/jobs/train:1.0",
        ) from None
    return text


def check_image_pinned(image: str, path: str) -> None:
    """Reject images that float: no tag, or ``:latest``."""
    if "@" in image:  # a digest (the reference grammar allows only sha256 and sha512 ones)
        return
    last = image.rsplit("/", 1)[-1]
    tag = last.split(":", 1)[1] if ":" in last else None
    if tag is None or tag == "latest":
        raise ConfigError(
            path,
            f"{image!r} is not pinned; give it a tag other than latest, or a digest (@sha256:...), so every "
            "run uses the same image",
        )


def kind_name(value: Any) -> str:
    kinds = {dict: "mapping", list: "list", str: "string", int: "integer", float: "number", bool: "boolean"}
    return "null value (nothing after the colon)" if value is None else kinds.get(type(value), type(value).__name__)


def check_name(value: str, path: str, rule: Callable[[str], str | None]) -> str:
    """``value`` when it passes a Kubernetes name rule (from pwdeploy.names), else a ConfigError."""
    problem = rule(value)
    if problem is not None:
        raise ConfigError(path, problem)
    return value
