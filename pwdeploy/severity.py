"""How much a finding matters, the one scale `check` and `diagnose` share: ``error`` (the job fails or cannot
start), ``warning`` (it may go wrong, or went wrong and recovered), ``info`` (worth knowing). Listed most severe
first: findings are ordered by ``SEVERITIES.index``."""

from __future__ import annotations

from typing import Literal

Severity = Literal["error", "warning", "info"]
SEVERITIES: tuple[Severity, ...] = ("error", "warning", "info")
