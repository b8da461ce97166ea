"""The reference tables the code defines, as Markdown for ``docs/``.

Config fields, commands, exit codes, capacity modes, diagnose causes and cluster readiness checks.
A docs page holds each between two marker comments::

    <!-- generated: exit-codes -->
    ...
    <!-- end generated: exit-codes -->

``refresh`` rewrites what lies between them; the tests compare the pages with it (``pytest --update-goldens``
rewrites them), so a table in the docs cannot drift from the code."""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Sequence
from types import ModuleType

from pwdeploy import errors

_BLOCK = re.compile(r"(<!-- generated: ([a-z-]+) -->\n)(.*?)(<!-- end generated: \2 -->)", re.DOTALL)


def _markdown(docstring: str) -> str:
    """A docstring's first paragraph on one line, with reStructuredText's double backquotes as Markdown's."""
    first = inspect.cleandoc(docstring).split("\n\n", 1)[0]
    return " ".join(first.split()).replace("``", "`")


def _table(header: tuple[str, ...], rows: Sequence[tuple[str, ...]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def config_fields() -> str:
    from pwdeploy.config.json_schema import config_reference_markdown

    return config_reference_markdown()


def commands() -> str:
    from pwdeploy.cli.commands import TABLE

    rows = [(f"`pwdeploy {name}`", entry.summary, f"`{entry.example}`") for name, entry in TABLE.items() if name]
    return _table(("command", "what it does", "example"), [(n, s or "", e) for n, s, e in rows])


def exit_codes() -> str:
    """One row per exit status: those of the error classes (the first class of each code, so a subclass sharing
    its parent's code adds no row) and the few the CLI exits with itself."""
    meanings = dict(errors.STATUSES_WITHOUT_CLASS)
    classes = [c for _, c in inspect.getmembers(errors, inspect.isclass) if issubclass(c, errors.PwdeployError)]
    for cls in sorted(classes, key=lambda c: len(c.__mro__)):
        meanings.setdefault(cls.exit_code, f"{_markdown(cls.__doc__ or '')} (`{cls.__name__}`)")
    return _table(("code", "meaning"), [(str(code), meanings[code]) for code in sorted(meanings)])


def diagnose_causes() -> str:
    from pwdeploy.cluster.diagnose.causes import MEANINGS, READS, ROWS, STAGES

    sources = {row.id: row.source for row in ROWS}
    rows = [
        (stage, f"`{cause}`", MEANINGS[cause], READS[stage], sources[cause])
        for stage, causes in STAGES.items()
        for cause in causes
    ]
    return _table(("stage", "cause", "meaning", "read from", "source"), rows)


def capacity_modes() -> str:
    """One row per mode of ``pwdeploy.config.capacity_modes``: what it renders on the workers and the JobSet."""
    from pwdeploy import identifiers as ids
    from pwdeploy.config.capacity_modes import MODES

    rows = []
    for mode in MODES:
        select = [f'`{key}: "{value}"`' for key, value in mode.labels]
        tolerate = [f"`{key}={value}:NoSchedule`" for key, value in mode.taints]
        if mode.reservation:
            select.append(
                f"`{ids.RESERVATION_NAME_LABEL}: NAME`; a shared one also `{ids.RESERVATION_PROJECT_LABEL}: "
                "PROJECT` (a label value cannot hold `/`)"
            )
            tolerate.append(f"`{ids.RESERVATION_NAME_LABEL}=NAME:NoSchedule`")
        duration = {
            "node-label": f'workers also select `{ids.MAX_RUN_DURATION_LABEL}: "SECONDS"`',
            "jobset-annotation": f'the JobSet carries `{ids.MAX_RUN_DURATION_ANNOTATION}: "SECONDS"`',
        }
        timed = duration.get(mode.run_duration, "not allowed")
        rows.append(
            (
                f"`{mode.name}`",
                "; ".join(select) or "nothing more",
                ", ".join(tolerate),
                timed,
                f"`{mode.pool_flags}`",
            )
        )
    return _table(
        (
            "capacity",
            "workers select (besides the TPU shape)",
            "workers tolerate (besides `google.com/tpu`)",
            "with `tpu.max_run_duration`",
            "node pool flags",
        ),
        rows,
    )


def readiness_modules() -> list[ModuleType]:
    """The readiness checks' modules, in the order of the report."""
    from pwdeploy.readiness import MODULES

    return list(MODULES)


def readiness_checks() -> str:
    """Each check's row from its module's docstring, which starts with the check's name: ``name``: what it checks."""
    rows = []
    for module in readiness_modules():
        name, _, what = _markdown(module.__doc__ or "").partition(": ")
        rows.append((name, what, module.SOURCE))
    return _table(("check", "what it checks", "source"), rows)


def known_defects() -> str:
    """The known defects the readiness row ``controllers`` names, with the releases that fix them and sources."""
    from pwdeploy.readiness.controllers import DEFECTS

    def releases(fixed: tuple[tuple[int, int, int], ...]) -> str:
        return ", ".join("v" + ".".join(map(str, v)) for v in fixed) or "no release yet"

    rows = [(d.component, d.what, releases(d.fixed), d.fix, d.source) for d in DEFECTS]
    return _table(("component", "defect", "fixed in", "what to do", "source"), rows)


def rbac_role() -> str:
    """The Role that grants what the readiness row ``permissions`` checks (docs/cluster.md)."""
    from pwdeploy.readiness.permissions import role_yaml

    return f"```yaml\n{role_yaml()}\n```\n"


def pathways_releases() -> str:
    """The Pathways releases seen, per JAX version (pwdeploy.releases)."""
    from pwdeploy.releases import table

    return table()


TABLES: dict[str, Callable[[], str]] = {
    "config-fields": config_fields,
    "commands": commands,
    "exit-codes": exit_codes,
    "capacity-modes": capacity_modes,
    "diagnose-causes": diagnose_causes,
    "readiness-checks": readiness_checks,
    "rbac-role": rbac_role,
    "known-defects": known_defects,
    "pathways-releases": pathways_releases,
}


def blocks(text: str) -> list[str]:
    """The names of the generated tables a page holds, in order."""
    return [match.group(2) for match in _BLOCK.finditer(text)]


def refresh(text: str) -> str:
    """The page with every generated table as the code defines it now."""
    return _BLOCK.sub(lambda m: m.group(1) + TABLES[m.group(2)]() + m.group(4), text)
