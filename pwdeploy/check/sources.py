"""Which files `pwdeploy check` reads: the entry module of ``main.command``, what it imports from the job's folder
(transitively), and the files and folders named on the command line. Each is parsed once; a file Python cannot
parse is a finding, not a crash."""

from __future__ import annotations

import ast
import io
import os
import re
import tokenize
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

from pwdeploy.check.findings import Finding, quote
from pwdeploy.check.program import Module, Program
from pwdeploy.config import JobConfig
from pwdeploy.errors import ConfigError

MAX_BYTES = 2 * 2**20  # larger .py files are generated code, not a training program
MAX_FILES = 20_000
SKIPPED_DIRS = frozenset({"__pycache__", "node_modules", "site-packages", "venv", ".venv", ".pwdeploy", ".git"})
_PYTHON = re.compile(r"python[0-9.]*")
_IGNORE = re.compile(r"#\s*pwdeploy:\s*ignore(?:\[([^\]]*)\])?")
SYNTAX_SOURCE = "https://docs.python.org/3/library/ast.html#ast.parse"


def entry_script(job: JobConfig) -> Path | None:
    """The Python file ``main.command`` runs (``python3 train.py``, ``python -u -m pkg.train``), beside the config
    file; None when the command is not a Python program (``bash run.sh``)."""
    command = list(job.main.command)
    if not command:
        return None
    if command[0].endswith(".py"):
        return (job.base_dir / command[0]).resolve()
    if not _PYTHON.fullmatch(os.path.basename(command[0])):
        return None
    rest = command[1:]
    while rest and rest[0].startswith("-") and rest[0] != "-m":
        rest = rest[2:] if rest[0] in ("-W", "-X", "-c") else rest[1:]
    if not rest:
        return None
    if rest[0] == "-m" and len(rest) > 1:
        parts = rest[1].split(".")
        for candidate in (
            job.base_dir.joinpath(*parts).with_suffix(".py"),
            job.base_dir.joinpath(*parts, "__main__.py"),
        ):
            if candidate.is_file():
                return candidate.resolve()
        return None
    return (job.base_dir / rest[0]).resolve() if rest[0].endswith(".py") else None


def python_files(paths: Sequence[Path]) -> Iterator[tuple[Path, Path]]:
    """(file, the folder its module name is relative to) for each PATH: a file, or every .py file in a folder."""
    for path in paths:
        if path.is_file():
            yield path.resolve(), path.resolve().parent
        elif path.is_dir():
            root = path.resolve()
            for folder, dirs, files in os.walk(root):
                dirs[:] = sorted(d for d in dirs if d not in SKIPPED_DIRS and not d.startswith("."))
                for name in sorted(files):
                    if name.endswith(".py"):
                        yield Path(folder) / name, root
        else:
            raise ConfigError(None, f"{path}: no such file or folder", source="PATH", hint="name .py files or folders")


def shown(path: Path, cwd: Path) -> str:
    try:
        return str(path.relative_to(cwd))
    except ValueError:
        return str(path)


def module_name(path: Path, root: Path) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" and len(parts) > 1 else parts)


def read(path: Path, name: str, cwd: Path) -> Module | Finding:
    """The parsed module, or a syntax-error finding saying why it could not be read."""
    label = shown(path, cwd)
    try:
        if path.stat().st_size > MAX_BYTES:
            return _unreadable(label, 0, f"larger than {MAX_BYTES // 2**20} MiB: not read")
        data = path.read_bytes()
        text = data.decode("utf-8")
        tree = ast.parse(text, filename=str(path))
    except SyntaxError as exc:
        detail = f": {quote(exc.text)}" if exc.text and exc.text.strip() else ""
        return _unreadable(label, exc.lineno or 0, f"Python cannot parse this file ({exc.msg}){detail}")
    except (UnicodeDecodeError, ValueError) as exc:
        return _unreadable(label, 0, f"Python cannot read this file ({exc})")
    except (RecursionError, MemoryError):
        return _unreadable(label, 0, "nested too deeply for Python's parser")
    except OSError as exc:
        return _unreadable(label, 0, f"cannot read this file ({exc.strerror or exc})")
    return Module(name=name, path=path, shown=label, tree=tree, text=text, ignores=ignores(text))


def _unreadable(label: str, line: int, message: str) -> Finding:
    fix = "fix the file so that `python -m py_compile FILE` accepts it; nothing else in it was checked"
    return Finding("syntax-error", "error", label, line, message, fix, SYNTAX_SOURCE)


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


class Collector:
    """Reads files once each, following the entry module's imports into ``roots``."""

    def __init__(self, cwd: Path) -> None:
        self.cwd = cwd
        self.modules: dict[Path, Module] = {}
        self.problems: list[Finding] = []
        self.files: list[str] = []
        self._seen: set[Path] = set()

    def add(self, path: Path, name: str) -> Module | None:
        """The module of ``path`` (read once); None when it could not be read (a finding says why)."""
        path = path.resolve()
        if path in self._seen:
            return self.modules.get(path)
        if len(self._seen) >= MAX_FILES:
            raise ConfigError(None, f"more than {MAX_FILES} Python files to check", source="PATH")
        self._seen.add(path)
        self.files.append(shown(path, self.cwd))
        result = read(path, name, self.cwd)
        if isinstance(result, Finding):
            self.problems.append(result)
            return None
        self.modules[path] = result
        return result

    def follow(self, entry: Module, roots: Iterable[Path]) -> None:
        """Add every module the entry imports (and they import) that is a file under one of ``roots``."""
        folders = list(dict.fromkeys(r.resolve() for r in roots))
        done = {entry.path.resolve()}
        queue = [entry]
        while queue:
            module = queue.pop()
            for name in imported_names(module):
                found = next((p for root in folders if (p := resolve(name, root)) is not None), None)
                if found is None or found.resolve() in done:
                    continue
                done.add(found.resolve())
                added = self.add(found, name)
                if added is not None:
                    queue.append(added)

    def program(self, entry: Module | None) -> Program:
        ordered = ([entry] if entry else []) + [m for m in self.modules.values() if m is not entry]
        return Program(modules=ordered, entry=entry)


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


def resolve(name: str, root: Path) -> Path | None:
    parts = name.split(".")
    for candidate in (root.joinpath(*parts).with_suffix(".py"), root.joinpath(*parts, "__init__.py")):
        if candidate.is_file():
            return candidate
    return None
