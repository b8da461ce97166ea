"""`pwdeploy check`: will this JAX program work on Pathways, and where will it be slow? The job's Python sources
are read with ``ast`` (never imported or run), with its config and rendered manifests for the rules that need
them; each rule is a small visitor with the public source it rests on (``pwdeploy.check.rules``)."""

from __future__ import annotations

from pwdeploy.check.results import Report
from pwdeploy.check.run import check, check_before_run
from pwdeploy.severity import Severity

__all__ = ["Report", "Severity", "check", "check_before_run"]
