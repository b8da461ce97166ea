"""Reading the job's YAML file: one mapping, read strictly. Two equal keys in one mapping are an error (YAML keeps
the last without a word); values that are text whatever they look like (an env value, a command's word, a pip
argument) are kept as written; a word of main.command that YAML would drop as a comment is an error; a file that is
too large, not UTF-8 or not YAML is refused naming it. pwdeploy.config.load reads the job through it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from pwdeploy.config.values import kind_name
from pwdeploy.errors import ConfigError

_SAFE_LOADER: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml when present


def _construct_unique_mapping(loader: yaml.SafeLoader, node: yaml.MappingNode, deep: bool = False) -> Any:
    """A mapping whose keys are all different: YAML itself keeps the last of two equal keys without a word, so a
    second ``main:`` block would silently replace the first."""
    seen: set[str] = set()
    for key_node, _ in node.value:
        if isinstance(key_node, yaml.ScalarNode) and key_node.tag != "tag:yaml.org,2002:merge":
            if key_node.value in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"{key_node.value!r} appears twice in one mapping; keep one", key_node.start_mark
                )
            seen.add(key_node.value)
    return _SAFE_LOADER.construct_mapping(loader, node, deep)


_LOADER: type[yaml.SafeLoader] = type(
    "UniqueKeyLoader", (_SAFE_LOADER,), {"construct_mapping": _construct_unique_mapping}
)


_STR_TAG = "tag:yaml.org,2002:str"
_NULL_TAG = "tag:yaml.org,2002:null"
# Where a value is text whatever it looks like: YAML 1.1 reads an unquoted `yes` as true, `0755` as 493 and `1e-3`
# as 0.001, so an environment value, a command's word or a pip argument is kept as written (Kubernetes, for its
# part, refuses a number as an env value; kubectl users quote them).
_TEXT_MAPPINGS = {("main", "env"), ("worker_env",)}
_TEXT_SEQUENCES = {("main", "command"), ("image", "pip_args"), ("sidecar", "pip_args")}


def _construct(text: str) -> Any:
    """The document in ``text``, with the values of _TEXT_MAPPINGS and _TEXT_SEQUENCES kept as their source text."""
    node = yaml.compose(text, Loader=_LOADER)
    if node is None:
        return None
    if isinstance(node, yaml.MappingNode):
        _keep_text(node, (), text)
    loader = _LOADER("")
    try:
        return loader.construct_document(node)
    finally:
        loader.dispose()


def _keep_text(mapping: yaml.MappingNode, where: tuple[str, ...], text: str) -> None:
    for key, value in mapping.value:
        if not isinstance(key, yaml.ScalarNode):
            continue
        path = (*where, str(key.value))
        if isinstance(value, yaml.MappingNode):
            if path in _TEXT_MAPPINGS:
                _as_text(item for _, item in value.value)
            elif not where:  # a section: one level down
                _keep_text(value, path, text)
        elif isinstance(value, yaml.SequenceNode) and path in _TEXT_SEQUENCES:
            _as_text(value.value)
        elif isinstance(value, yaml.ScalarNode) and path == ("main", "command"):
            _comment_after_command(value, text)


def _as_text(nodes: Any) -> None:
    for node in nodes:
        if isinstance(node, yaml.ScalarNode) and not node.style and node.tag not in (_STR_TAG, _NULL_TAG):
            node.tag = _STR_TAG  # its value is the text as written


def _comment_after_command(node: yaml.ScalarNode, text: str) -> None:
    """An unquoted command followed by `` #1`` on its line: YAML drops that as a comment, so the word the user
    meant as an argument would silently be missing. A comment that reads as one (``# train``) is left alone."""
    if node.style or node.start_mark.line != node.end_mark.line:  # quoted or a block: no comment inside
        return
    lines = text.splitlines()
    rest = lines[node.end_mark.line][node.end_mark.column :] if node.end_mark.line < len(lines) else ""
    comment = rest.lstrip()
    if rest[:1].isspace() and comment.startswith("#") and comment[1:2] and not comment[1].isspace():
        word = comment.split()[0]
        raise ConfigError(
            "main.command",
            f"{node.value!r} is followed by {word!r}, which YAML reads as a comment, so it is not part of the command",
            hint=f'quote the whole command if it was meant as an argument: command: "{node.value} {word}"',
        )


# A job config is a few KiB; what it renders must fit one Kubernetes object (etcd takes 1.5 MiB per request by
# default). A bound keeps `-f /dev/zero` (or a log file given by mistake) from being read for ever.
MAX_CONFIG_BYTES = 1 << 20


def read_file(path: Path) -> dict[str, Any]:
    """The raw mapping in a YAML job file; ConfigError for a missing, unreadable, too large or non-UTF-8 file, or
    bad YAML."""
    text = _read_text(path)
    try:
        data = _construct(text)
    except ConfigError as exc:
        exc.source = str(path)
        raise
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ConfigError(None, f"{path}: invalid YAML{where}: {problem}") from None
    except ValueError as exc:  # a value YAML reads but Python cannot hold (an integer of thousands of digits)
        raise ConfigError(None, f"{path}: invalid YAML: {str(exc)[:200]}") from None
    except RecursionError:
        raise ConfigError(None, f"{path}: invalid YAML: nested too deep to be a job config") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(None, f"{path}: the top level must be a mapping of fields, not a {kind_name(data)}")
    return data


def _read_text(path: Path) -> str:
    try:
        with path.open("rb") as file:
            raw = file.read(MAX_CONFIG_BYTES + 1)
        if len(raw) > MAX_CONFIG_BYTES:
            raise ConfigError(
                None,
                f"config file {path} is more than {MAX_CONFIG_BYTES >> 20} MiB: not a job config",
                hint="-f names the job's YAML file (a few KiB)",
            )
        return raw.decode("utf-8")
    except FileNotFoundError:
        raise ConfigError(None, f"config file {path} does not exist") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(
            None,
            f"config file {path} is not UTF-8 text (byte 0x{exc.object[exc.start]:02x} at offset {exc.start})",
            hint="save it as UTF-8",
        ) from None
    except OSError as exc:
        raise ConfigError(None, f"cannot read config file {path}: {exc.strerror}") from None
