"""Which files `pwdeploy check` reads: the entry module of ``main.command``, what it imports from the job's folder
(transitively), and the files and folders named on the command line. Each is parsed once; a file Python cannot
parse is a finding, not a crash."""

from __future__ import annotations

import ast
import errno
import io
import os
import re
import sys
import tokenize
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import NamedTuple

from pwdeploy.check.program import Module
from pwdeploy.check.results import at, quote
from pwdeploy.errors import ConfigError
from pwdeploy.finding import Finding
from pwdeploy.job_python import JobPython

MAX_BYTES = 2 * 2**20  # larger .py files are generated code, not a training program
MAX_FILES = 20_000
SKIPPED_DIRS = frozenset({"__pycache__", "node_modules", "site-packages", "venv", ".venv", ".pwdeploy", ".git"})
_IGNORE = re.compile(r"#\s*pwdeploy:\s*ignore(?:\[([^\]]*)\])?")
SYNTAX_SOURCE = "https://docs.python.org/3/library/ast.html#ast.parse"


PYTHON_SUFFIXES = frozenset({".py", ".pyw", ""})  # a file without a suffix is a script (bin/train)
YAML_SUFFIXES = frozenset({".yaml", ".yml"})


class Skipped(NamedTuple):
    """A file a PATH names or a folder holds that is not read, and why (a note in the report)."""

    path: Path
    why: str


def real(path: Path, what: str = "PATH") -> Path:
    """``path`` with its links resolved; a symlink loop is bad input, not an internal error."""
    try:
        return path.resolve(strict=path.is_symlink())
    except (RuntimeError, OSError) as exc:
        if isinstance(exc, RuntimeError) or getattr(exc, "errno", None) == errno.ELOOP:
            raise ConfigError(
                None, f"{path}: a symlink loop", source=what, hint="fix or remove the link, or name other files"
            ) from None
        raise ConfigError(None, f"{path}: a link to nothing", source=what, hint="fix or remove the link") from None


def inside(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def python_files(paths: Sequence[Path]) -> Iterator[tuple[Path, Path] | Skipped]:
    """(file, the folder its module name is relative to) for each PATH: a file, or every .py file in a folder; or
    what is not read, and why. A YAML file is the job config given in the wrong place: an error that says -f."""
    for path in paths:
        if path.is_symlink() or path.exists():
            resolved = real(path)
        else:
            raise ConfigError(None, f"{path}: no such file or folder", source="PATH", hint="name .py files or folders")
        if resolved.is_file():
            yield _named_file(path, resolved)
        elif resolved.is_dir():
            yield from _folder(resolved)
        else:
            raise ConfigError(None, f"{path}: not a file or folder", source="PATH", hint="name .py files or folders")


def _named_file(path: Path, resolved: Path) -> tuple[Path, Path] | Skipped:
    suffix = path.suffix.lower()
    if suffix in YAML_SUFFIXES:
        raise ConfigError(
            None,
            f"{path} is YAML, not a Python source",
            source="PATH",
            hint=f"give a job config with -f: pwdeploy check -f {path} (PATHs are the program's .py files)",
        )
    if suffix == ".ipynb":
        return Skipped(path, NOTEBOOK)
    if suffix not in PYTHON_SUFFIXES:
        what = "a requirements file" if path.name.startswith("requirements") else f"not a Python source ({suffix})"
        return Skipped(path, f"{what}: not read")
    return resolved, resolved.parent


NOTEBOOK = "a notebook: not read (export its code with `jupyter nbconvert --to script`, then check the .py)"


def _folder(root: Path) -> Iterator[tuple[Path, Path] | Skipped]:
    """Every .py file below ``root`` (hidden and tool folders skipped); links are not followed out of it."""
    for folder, dirs, files in os.walk(root):  # links to folders are not walked into (followlinks=False)
        dirs[:] = sorted(d for d in dirs if d not in SKIPPED_DIRS and not d.startswith("."))
        for name in dirs:
            link = Path(folder) / name
            if link.is_symlink() and not inside(real(link), root):
                yield Skipped(link, f"a link out of {root}: not followed")
        for name in sorted(files):
            file = Path(folder) / name
            if name.endswith(".ipynb"):
                yield Skipped(file, NOTEBOOK)
            if not name.endswith(".py"):
                continue
            if file.is_symlink():
                target = real(file)
                if not inside(target, root):
                    yield Skipped(file, f"a link out of {root}: not followed")
                    continue
            yield file, root


def shown(path: Path, cwd: Path) -> str:
    try:
        return str(path.relative_to(cwd))
    except ValueError:
        return str(path)


def module_name(path: Path, root: Path) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" and len(parts) > 1 else parts)


def read(path: Path, name: str, cwd: Path, grammar: JobPython | None = None) -> Module | Finding | Skipped:
    """The parsed module; a syntax-error finding saying why Python could not read it; or, for a module too large to
    read, why it was skipped. The encoding is Python's (PEP 263): a UTF-8 BOM, a ``coding:`` line.

    ``grammar``: the Python the job runs. An older one than pwdeploy's parses with its grammar (``ast.parse``'s
    ``feature_version``: newer syntax is an error there too); a file that pwdeploy's older Python cannot parse for a
    job of a newer one is not read (a note names both), rather than called an error."""
    label = shown(path, cwd)
    here = f"{sys.version_info.major}.{sys.version_info.minor}"
    older = grammar is not None and _minor(grammar.version) < sys.version_info[:2]
    feature = _minor(grammar.version) if grammar is not None and older else None
    try:
        size = path.stat().st_size
        if size > MAX_BYTES:
            return Skipped(path, f"{size / 2**20:.1f} MiB, over the {MAX_BYTES // 2**20} MiB {TOO_LARGE}")
        data = path.read_bytes()
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
        text = data.decode(encoding)
        del data
        tree = ast.parse(text, filename=str(path), feature_version=feature)
    except SyntaxError as exc:
        if grammar is not None and _minor(grammar.version) > sys.version_info[:2]:
            return Skipped(path, newer_syntax(here, grammar))
        detail = f": {quote(exc.text)}" if exc.text and exc.text.strip() else ""
        parser = f"{grammar.version} ({grammar.why})" if grammar is not None and older else here
        return _unreadable(label, exc.lineno or 0, f"Python {parser} cannot parse this file ({exc.msg}){detail}")
    except (UnicodeDecodeError, LookupError, ValueError) as exc:
        return _unreadable(label, 0, f"Python cannot read this file ({exc})")
    except (RecursionError, MemoryError):
        return _unreadable(label, 0, "nested too deeply for Python's parser")
    except OSError as exc:
        return _unreadable(label, 0, f"cannot read this file ({exc.strerror or exc})")
    return Module(name=name, path=path, shown=label, tree=tree, text=text, ignores=ignores(text))


def newer_syntax(here: str, grammar: JobPython) -> str:
    return (
        f"Python {here}, which runs pwdeploy, cannot parse it, and the job runs Python {grammar.version} "
        f"({grammar.why}): not checked (run pwdeploy under Python {grammar.version} to check it)"
    )


def _minor(version: str) -> tuple[int, int]:
    major, _, minor = version.partition(".")
    return int(major), int(minor or 0)


# Why a larger module is not read: its syntax tree takes some 50 times its size, and a module that large is
# generated (tables, protobufs), not a training program's code.
TOO_LARGE = "one module may have: not read (generated code is not checked)"


def _unreadable(label: str, line: int, message: str) -> Finding:
    fix = "fix the file so that `python -m py_compile FILE` accepts it; nothing else in it was checked"
    return Finding("syntax-error", "error", at(label, line), message, fix, SYNTAX_SOURCE)


def ignores(text: str) -> dict[int, frozenset[str]]:
    """Line -> the rules its ``# pwdeploy: ignore[rule, ...]`` comment silences (``*``: a bare ``ignore``). Only
    comments count: the same text inside a string does not."""
    if "pwdeploy:" not in text:
        return {}
    found: dict[int, frozenset[str]] = {}
    try:
        for token in tokenize.generate_tokens(io.StringIO(text).readline):
            if token.type == tokenize.COMMENT and (match := _IGNORE.search(token.string)):
                rules = match.group(1)
                names = {r.strip() for r in rules.split(",") if r.strip()} if rules is not None else {"*"}
                found[token.start[0]] = frozenset(names)
    except (tokenize.TokenError, SyntaxError):
        pass
    return found


def imported_names(module: Module) -> Iterator[str]:
    """Every module name ``module`` imports, candidate submodules of ``from a import b`` included."""
    for node in module.of(ast.Import, ast.ImportFrom):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name
        elif isinstance(node, ast.ImportFrom):
            base = module.absolute(node)
            if base:
                yield base
            for alias in node.names:
                if alias.name != "*":
                    yield f"{base}.{alias.name}" if base else alias.name


def resolve(name: str, root: Path) -> Path | Skipped | None:
    """The job module ``name`` is under ``root``; a link out of ``root`` is not followed (nor read, nor quoted)."""
    parts = name.split(".")
    for candidate in (root.joinpath(*parts).with_suffix(".py"), root.joinpath(*parts, "__init__.py")):
        if candidate.is_file():
            if candidate.is_symlink() and not inside(real(candidate), root):
                return Skipped(candidate, f"a link out of {root}: not followed")
            return candidate
    return None
