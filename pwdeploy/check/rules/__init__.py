"""Every rule of `pwdeploy check`, in the order of the patterns they find (docs/check.md's table is made from
this list: ``rule_table``)."""

from __future__ import annotations

from pwdeploy.check.rule import Rule
from pwdeploy.check.rules import (
    checkpointing_impl,
    checkpoints,
    controller_side,
    devices,
    hosts,
    job,
    loops,
    signals,
    startup,
)

RULES: tuple[Rule, ...] = tuple(
    sorted(
        (
            *startup.RULES,
            *checkpoints.RULES,
            *controller_side.RULES,
            *checkpointing_impl.RULES,
            *devices.RULES,
            *job.RULES,
            *hosts.RULES,
            *loops.RULES,
            *signals.RULES,
        ),
        key=lambda rule: rule.number,
    )
)
BY_ID = {rule.id: rule for rule in RULES}
SYNTAX_ERROR = "syntax-error"  # not a rule of its own: a file Python cannot parse was not checked


def rule_table() -> str:
    """The Markdown table of the rules, as docs/check.md shows it."""
    rows = [
        "| # | rule | severity | finds | reads the job (-f) | source |",
        "|---|---|---|---|---|---|",
    ]
    for rule in RULES:
        summary = rule.summary.replace("|", "\\|")
        rows.append(
            f"| {rule.number} | `{rule.id}` | {rule.severity} | {summary} | {'yes' if rule.needs_job else ''} "
            f"| {rule.source} |"
        )
    rows.append(f"| - | `{SYNTAX_ERROR}` | error | a source file Python cannot parse (nothing in it is checked) | | |")
    return "\n".join(rows) + "\n"
