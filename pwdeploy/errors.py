"""The one exception hierarchy of pwdeploy.

Library code raises these; only the CLI layer turns them into a message and an exit code.
"""

from __future__ import annotations


class PwdeployError(Exception):
    """Base class. ``exit_code`` is what the CLI exits with."""

    exit_code = 1

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return self.message if not self.hint else f"{self.message}\n  hint: {self.hint}"


class ConfigError(PwdeployError):
    """Bad input: a config field, a flag, a file that cannot be read."""

    exit_code = 2

    def __init__(self, field: str | None, message: str, *, hint: str | None = None) -> None:
        super().__init__(f"{field}: {message}" if field else message, hint=hint)
        self.field = field


class ValidationError(PwdeployError):
    """Rendered manifests that the Kubernetes/JobSet schemas or webhook rules reject."""

    exit_code = 3

    def __init__(self, problems: list[str]) -> None:
        lines = "\n".join(f"  - {p}" for p in problems)
        super().__init__(f"{len(problems)} problem(s) in the manifests:\n{lines}")
        self.problems = problems


class ClusterError(PwdeployError):
    """The Kubernetes API refused or failed a request."""

    exit_code = 4


class BuildError(PwdeployError):
    """A container build or push failed, or no engine is reachable."""

    exit_code = 5


class PreflightError(PwdeployError):
    """One or more preflight checks failed."""

    exit_code = 6


class LocalRunError(PwdeployError):
    """The local run could not be started."""

    exit_code = 7


class LocalLimitsError(PwdeployError):
    """A local run used more memory or /dev/shm than the config gives its container on the cluster."""

    exit_code = 8
