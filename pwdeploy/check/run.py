"""`pwdeploy check` as a function: read the sources, render the job (for the rules that read its manifests),
run every rule, drop what ignore comments silence, and return the report."""

from __future__ import annotations

import gc
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from pwdeploy.check.findings import Finding, Report
from pwdeploy.check.program import Module
from pwdeploy.check.rule import Context
from pwdeploy.check.rules import RULES
from pwdeploy.check.sources import Collector, entry_script, module_name, python_files, shown
from pwdeploy.config import JobConfig
from pwdeploy.errors import ConfigError


def check(
    job: JobConfig | None, paths: Sequence[Path] = (), *, cwd: Path | None = None, config_file: Path | None = None
) -> Report:
    """The findings over the job's entry module (and what it imports from the job's folder) and ``paths``."""
    with _without_cyclic_gc():
        return _check(job, paths, cwd=cwd, config_file=config_file)


@contextmanager
def _without_cyclic_gc() -> Iterator[None]:
    """Syntax trees hold no reference cycles; the collector would only walk every tree read so far, again and
    again as more are read (half the time over 1,000 files). Reference counting still frees them."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _check(job: JobConfig | None, paths: Sequence[Path], *, cwd: Path | None, config_file: Path | None) -> Report:
    cwd = (cwd or Path.cwd()).resolve()
    collector = Collector(cwd)
    notes: list[str] = []
    entry = None
    if job is not None:
        script = entry_script(job)
        if script is None:
            notes.append("main.command runs no Python file pwdeploy can find: name the sources as PATHs")
        elif not script.is_file():
            raise ConfigError("main.command", f"runs {script}, which does not exist", hint="fix main.command")
        else:
            entry = collector.add(script, script.stem)
            if entry is not None:
                collector.follow(entry, [script.parent, job.base_dir])
    for file, root in python_files(paths):
        added = collector.add(file, module_name(file, root))
        if entry is None and job is None and added is not None and paths[0].is_file():
            entry = added  # without -f, the first file named is the entry module
            collector.follow(entry, [file.parent])
    if job is None and not paths:
        raise ConfigError(
            None, "nothing to check", hint="pwdeploy check -f job.yaml, or name files: pwdeploy check train.py"
        )
    program = collector.program(entry)
    label = shown(config_file.resolve(), cwd) if config_file is not None else "job config"
    context = Context(program, job, label, _read_text(config_file), *_rendered_env(job))
    findings, ignored = _findings(context, cwd)
    return Report(findings=collector.problems + findings, files=collector.files, ignored=ignored, notes=notes)


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


def _findings(context: Context, cwd: Path) -> tuple[list[Finding], int]:
    modules = {m.shown: m for m in context.modules}
    found: list[Finding] = []
    ignored = 0
    seen: set[tuple[str, str, int, str]] = set()
    for rule in RULES:
        for hit in rule.check(context):
            file = shown(Path(hit.file), cwd) if Path(hit.file).is_absolute() else hit.file
            key = (rule.id, file, hit.line, hit.message)
            if key in seen:
                continue
            seen.add(key)
            if _silenced(modules.get(file), hit.line, rule.id):
                ignored += 1
                continue
            found.append(Finding(rule.id, rule.severity, file, hit.line, hit.message, hit.fix or rule.fix, rule.source))
    return found, ignored


def _silenced(module: Module | None, line: int, rule: str) -> bool:
    if module is None:
        return False
    rules = module.ignores.get(line, frozenset())
    return rule in rules or "*" in rules
