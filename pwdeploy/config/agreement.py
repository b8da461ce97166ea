"""The field table and the typed model must hold the same fields: a row without its tuple field would load and
vanish, a tuple field without its row would never be set. Checked when pwdeploy.config.load is imported (a few
set operations), so a mismatch fails every command and every test at once, naming the field.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping


class ModelMismatch(Exception):
    """The field table and the typed model disagree: a mistake in pwdeploy itself, not in a job config."""


def disagreements(
    paths: Iterable[str],
    section_models: Mapping[str, type[tuple[object, ...]]],
    top_model: type[tuple[object, ...]],
    resolved: Iterable[str] = (),
    loader_fields: Iterable[str] = (),
) -> list[str]:
    """What differs between the config ``paths`` (the table's rows and the ``resolved`` values the checks add)
    and the NamedTuples: ``top_model`` for top-level paths and its ``loader_fields``, ``section_models`` for
    ``section.key`` paths; one sentence per field."""
    wanted: dict[str, set[str]] = {name: set() for name in ("", *section_models)}
    problems: list[str] = []
    for path in (*paths, *resolved):
        section, _, key = path.rpartition(".")
        if section not in wanted:
            problems.append(f"config field {path}: no section {section!r} in pwdeploy/config/model.py SECTION_MODELS")
            continue
        wanted[section].add(key)
    wanted[""] |= set(section_models) | set(loader_fields)
    models = {"": top_model, **section_models}
    for section, model in models.items():
        have = set(model._fields)  # type: ignore[attr-defined]
        where = f"{section}." if section else ""
        for key in sorted(wanted[section] - have):
            problems.append(
                f"config field {where}{key} has no field {key!r} in {model.__name__} (pwdeploy/config/model.py): "
                "add it there, or the loaded value would be dropped"
            )
        for key in sorted(have - wanted[section]):
            problems.append(
                f"{model.__name__}.{key} (pwdeploy/config/model.py) has no row {where}{key} in "
                "pwdeploy/config/fields.py: add the row, or it is never set"
            )
    return problems


def check_agreement(
    paths: Iterable[str],
    section_models: Mapping[str, type[tuple[object, ...]]],
    top_model: type[tuple[object, ...]],
    resolved: Iterable[str] = (),
    loader_fields: Iterable[str] = (),
) -> None:
    """ModelMismatch naming every field the table and the model do not share."""
    problems = disagreements(paths, section_models, top_model, resolved, loader_fields)
    if problems:
        raise ModelMismatch("the config's field table and typed model disagree:\n  " + "\n  ".join(problems))
