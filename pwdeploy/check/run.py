"""`pwdeploy check` as a function: read the sources one at a time (each file's rules run while its syntax tree is
in memory; what a rule needs across files is kept as small facts, and the tree is dropped), render the job (for the
rules that read its manifests), let the rules that need every module decide, drop what ignore comments silence,
and return the report. Memory is bounded by the largest file's tree plus the facts and findings."""

from __future__ import annotations

import gc
import os
import sys
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from pwdeploy.check.locate import Entry, locate
from pwdeploy.check.program import Module
from pwdeploy.check.results import Report, at
from pwdeploy.check.rule import Context, Hit, Known, Rule
from pwdeploy.check.rules import RULES
from pwdeploy.check.sources import (
    MAX_FILES,
    Skipped,
    imported_names,
    module_name,
    python_files,
    read,
    real,
    resolve,
    shown,
)
from pwdeploy.config import JobConfig
from pwdeploy.errors import ConfigError
from pwdeploy.finding import Finding
from pwdeploy.job_python import JobPython, job_python, python_near


def check(
    job: JobConfig | None, paths: Sequence[Path] = (), *, cwd: Path | None = None, config_file: Path | None = None
) -> Report:
    """The findings over the job's entry module (and what it imports from the job's folder) and ``paths``."""
    with _without_cyclic_gc(), _deep_trees():
        return _check(job, paths, cwd=cwd, config_file=config_file)


def check_before_run(
    job: JobConfig, *, config_file: Path | None = None, command: Sequence[str] = (), cwd: Path | None = None
) -> Report:
    """The check a local run and preflight run first, over the job's entry module (or over ``command``'s, started
    in ``cwd`` instead of main.command); an empty report when the program is not a Python file there (``bash
    run.sh``, ``python -c ...``): the run says so itself."""
    if command and cwd is not None:
        job = job._replace(main=job.main._replace(command=tuple(command)), base_dir=cwd)
    entry = locate(job)
    if entry.script is None:
        return Report(notes=[f"{entry.missing}: the program was not checked"])
    return check(job, [], config_file=config_file)


# Python runs a file whose syntax tree is up to about 3,000 levels deep (a 2,991-branch if/elif chain, or
# 1 + 1 + ... 2,991 times: one level more is its RecursionError at compile time); the parse, from within pwdeploy's
# frames, and the rules, which walk a tree recursively a few frames a level, are given room for that.
DEEP_TREE_FRAMES = 20_000


@contextmanager
def _deep_trees() -> Iterator[None]:
    before = sys.getrecursionlimit()
    sys.setrecursionlimit(max(before, DEEP_TREE_FRAMES))
    try:
        yield
    finally:
        sys.setrecursionlimit(before)


@contextmanager
def _without_cyclic_gc() -> Iterator[None]:
    """Syntax trees hold no reference cycles, and a file's tree is freed by reference counting when the next file
    is read: the cyclic collector would only walk the tree being read, again and again as its nodes are made."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


class Reader:
    """Reads files once each, one at a time, following the entry module's imports into the job's folders; each
    module's ``visit`` hits become findings at once and its ``learn`` facts are kept for the ``judge`` rules."""

    def __init__(self, cwd: Path, *, entry: bool, grammar: JobPython | None = None) -> None:
        self.cwd = cwd
        self.grammar = grammar  # the Python the job runs, when the config or its project says
        self.rules = [rule for rule in RULES if entry or not rule.needs_entry]
        self.files: list[str] = []
        self.findings: list[Finding] = []
        self.notes: list[str] = []
        self.skips: list[tuple[str, str]] = []  # (file, why) of each note about a file not read
        self.ignored = 0
        self.known: dict[str, list[Known]] = {rule.id: [] for rule in self.rules if rule.learn is not None}
        self.ignores: dict[str, dict[int, frozenset[str]]] = {}  # file -> its ignore comments (only files with some)
        self.entry: str | None = None
        self._seen: set[Path] = set()
        self._keys: set[tuple[str, str, int, str]] = set()

    def add(self, path: Path, name: str, *, entry: bool = False) -> list[str] | None:
        """Read ``path`` (once): the module names it imports, or None when it was not read (a finding or a note
        says why) or was read before."""
        path = real(path)
        if path in self._seen:
            return None
        if len(self._seen) >= MAX_FILES:
            raise ConfigError(None, f"more than {MAX_FILES} Python files to check", source="PATH")
        self._seen.add(path)
        result = read(path, name, self.cwd, self.grammar)
        if isinstance(result, Skipped):
            self.skipped(result)
            return None
        self.files.append(shown(path, self.cwd))
        if isinstance(result, Finding):
            self.findings.append(result)
            return None
        if entry:
            self.entry = result.shown
        return self.visit(result)

    def skipped(self, skipped: Skipped) -> None:
        file = shown(skipped.path, self.cwd)
        self.notes.append(f"{file}: {skipped.why}")
        self.skips.append((file, skipped.why))

    def visit(self, module: Module) -> list[str]:
        if module.ignores:
            self.ignores[module.shown] = module.ignores
        for rule in self.rules:
            try:
                if rule.visit is not None:
                    self.found(rule, rule.visit(module))
                if rule.learn is not None:
                    self.known[rule.id].append(Known(module.name, module.shown, rule.learn(module)))
            except RecursionError:  # deeper than the room _deep_trees gives: a note, never a crash
                self.notes.append(f"{module.shown}: nested too deeply for rule {rule.id}, which was not run on it")
        return list(imported_names(module))  # the tree goes when ``module`` does

    def follow(self, imports: list[str], roots: Iterable[Path]) -> None:
        """Read every module ``imports`` names (and they import) that is a file under one of ``roots``."""
        folders = list(dict.fromkeys(real(r) for r in roots))
        queue = [imports]
        while queue:
            for name in queue.pop():
                found = next((p for root in folders if (p := resolve(name, root)) is not None), None)
                if isinstance(found, Skipped):
                    if real(found.path) not in self._seen:
                        self._seen.add(real(found.path))
                        self.skipped(found)
                elif found is not None:
                    more = self.add(found, name)
                    if more:
                        queue.append(more)

    def found(self, rule: Rule, hits: Iterable[Hit]) -> None:
        for hit in hits:
            file = shown(Path(hit.file), self.cwd) if Path(hit.file).is_absolute() else hit.file
            key = (rule.id, file, hit.line, hit.message)
            if key in self._keys:
                continue
            self._keys.add(key)
            rules = self.ignores.get(file, {}).get(hit.line, frozenset())
            if rule.id in rules or "*" in rules:
                self.ignored += 1
                continue
            self.findings.append(
                Finding(rule.id, rule.severity, at(file, hit.line), hit.message, hit.fix or rule.fix, rule.source)
            )


def _check(job: JobConfig | None, paths: Sequence[Path], *, cwd: Path | None, config_file: Path | None) -> Report:
    cwd = (cwd or Path.cwd()).resolve()
    if job is None and not paths:
        raise ConfigError(
            None, "nothing to check", hint="pwdeploy check -f job.yaml, or name files: pwdeploy check train.py"
        )
    entry = locate(job) if job is not None else None
    first_file = job is None and paths[0].is_file()
    reader = Reader(
        cwd, entry=(entry is not None and entry.script is not None) or first_file, grammar=_grammar(job, paths)
    )
    if entry is not None:
        _read_entry(reader, entry)
    _read_paths(reader, paths, first_file=first_file)
    if not reader.files:
        why = "; ".join(reader.notes) or "no .py file in " + ", ".join(str(p) for p in paths)
        raise ConfigError(
            None, f"nothing to check: {why}", source="PATH", hint="name the program's .py files or folders"
        )
    label = shown(config_file.resolve(), cwd) if config_file is not None else "job config"
    context = Context(reader.known, reader.entry, job, label, _read_text(config_file), *_rendered_env(job))
    for rule in reader.rules:
        if rule.judge is not None:
            reader.found(rule, rule.judge(context))
    return Report(
        findings=reader.findings, files=reader.files, ignored=reader.ignored, notes=reader.notes, skipped=reader.skips
    )


def _read_entry(reader: Reader, entry: Entry) -> None:
    """The job's entry module and what it imports from the job's folders; a Python command whose module cannot
    be found is an error, a command that runs no Python a note."""
    if entry.script is None and not entry.not_python:
        raise ConfigError(
            "main.command",
            entry.missing,
            hint="set PYTHONPATH in main.env as the job's image has it (e.g. src for a src/ layout), or fix "
            "main.command",
        )
    if entry.script is None:
        reader.notes.append(f"{entry.missing}: name the program's sources as PATHs")
        return
    imports = reader.add(entry.script, entry.name, entry=True)
    if imports is not None:
        reader.follow(imports, entry.roots)


def _read_paths(reader: Reader, paths: Sequence[Path], *, first_file: bool) -> None:
    """The files PATHs name; without -f, the first file named is the entry module, whose imports are followed."""
    for item in python_files(paths):
        if isinstance(item, Skipped):
            reader.skipped(item)
            continue
        file, root = item
        is_entry = first_file and reader.entry is None
        imports = reader.add(file, module_name(file, root), entry=is_entry)
        if is_entry and imports is not None:
            reader.follow(imports, [file.parent])


def _grammar(job: JobConfig | None, paths: Sequence[Path]) -> JobPython | None:
    """The Python the job runs: as the config and its project say (-f), else as the project the first PATH is in
    says (its pyproject.toml's requires-python)."""
    running = f"{sys.version_info.major}.{sys.version_info.minor}"
    if job is not None:
        return job_python(job, running)
    if not paths:
        return None
    first = Path(os.path.abspath(paths[0]))  # not resolved: a link loop is the reader's to report
    return python_near(first if os.path.isdir(first) else first.parent, running)


def _read_text(path: Path | None) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace") if path is not None else ""
    except OSError:
        return ""


def _rendered_env(job: JobConfig | None) -> tuple[dict[str, str], dict[str, dict[str, str]]]:
    """(the main container's env, every container's env) as rendered: literal values only."""
    if job is None:
        return {}, {}
    from pwdeploy import manifests
    from pwdeploy.identifiers import MAIN_CONTAINER

    # Images not pushed yet do not change the environment: render with stand-ins rather than refuse.
    unpushed = "pwdeploy-check.invalid/unpushed:0"
    sidecar = job.sidecar._replace(image=job.sidecar.image or unpushed) if job.sidecar.enabled else job.sidecar
    rendered = job._replace(main=job.main._replace(image=job.main.image or unpushed), sidecar=sidecar)
    envs: dict[str, dict[str, str]] = {}
    for obj in manifests.build(rendered):
        for replicated in obj.get("spec", {}).get("replicatedJobs", []):
            pod = replicated["template"]["spec"]["template"]["spec"]
            for container in [*pod.get("initContainers", []), *pod.get("containers", [])]:
                env = {e["name"]: e["value"] for e in container.get("env", []) if "value" in e}
                envs.setdefault(container["name"], {}).update(env)
    return envs.get(MAIN_CONTAINER, {}), envs
