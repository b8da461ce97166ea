"""The one exception hierarchy of pwdeploy.

Library code raises these; only the CLI layer turns them into a message and an exit code.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Sequence

    from pwdeploy.finding import Finding

# Exit statuses no error class carries: the CLI exits with them itself.
STATUSES_WITHOUT_CLASS: dict[int, str] = {
    0: "success",
    130: "interrupted (Ctrl-C); a job already submitted keeps running, and the message says what state was left; "
    "`local run`: its job was stopped and every process it started ended",
    143: "`local run` got SIGTERM: its job was stopped and every process it started ended; `submit` got SIGTERM "
    "while applying: the message says whether the JobSet was created, and how to delete it",
}


class PwdeployError(Exception):
    """An unexpected internal error: this base class raised alone, or any exception pwdeploy did not expect.

    The base class of every pwdeploy error; ``exit_code`` is what the CLI exits with.
    """

    exit_code = 1

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return self.message if not self.hint else f"{self.message}\n  hint: {self.hint}"


class ConfigError(PwdeployError):
    """Bad input: a config file (missing, not UTF-8, bad YAML), a field, a flag, a quantity, an image reference,
    an unknown key, a kubeconfig not found or not usable (``--kubeconfig``, ``KUBECONFIG`` or ``~/.kube/config``),
    an unwritable ``--output-dir``.

    ``field`` is the dotted config path (``tpu.slices``) the problem is about, or None; ``source`` says where
    the value came from (the flag, the environment variable or the config file), when that is known.
    ``message`` is the problem alone; ``str()`` is the whole line.
    """

    exit_code = 2

    def __init__(self, field: str | None, message: str, *, hint: str | None = None, source: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.field = field
        self.source = source

    def line(self) -> str:
        """``field: message (from source)``: one line, without the hint."""
        where = f" (from {self.source})" if self.source and self.source != self.field else ""
        if self.field:
            return f"{self.field}: {self.message}{where}"
        return f"{self.source}: {self.message}" if self.source else self.message

    def __str__(self) -> str:
        return self.line() if not self.hint else f"{self.line()}\n  hint: {self.hint}"


class ConfigErrors(ConfigError):
    """Several config problems found in one pass, reported one line each."""

    def __init__(self, errors: list[ConfigError]) -> None:
        super().__init__(errors[0].field, errors[0].message, source=errors[0].source)
        self.errors = errors

    def __str__(self) -> str:
        return "\n".join(str(error) for error in self.errors)


class ArgumentError(ConfigError):
    """A wrong argument to one of pwdeploy's functions (``pwdeploy.api``): ``field`` is the argument's name
    (``namespace``, ``local_port``), which the command line shows as the flag that gives it (``--namespace``)."""


def raise_all(errors: list[ConfigError]) -> None:
    """Raise the one error, or all of them together; nothing when the list is empty."""
    if len(errors) == 1:
        raise errors[0]
    if errors:
        raise ConfigErrors(errors)


class DependencyError(PwdeployError):
    """The environment lacks something pwdeploy needs: an installed package (e.g. kubernetes-validate) or a tool.

    Not bad input.
    """

    exit_code = 9


class ValidationError(PwdeployError):
    """Rendered manifests that the Kubernetes/JobSet schemas or webhook rules reject."""

    exit_code = 3

    def __init__(self, findings: Sequence[Finding], *, listed: bool = True) -> None:
        """``listed``: the message lists every finding (False: they were printed already, as `-o json`)."""
        said = f"{len(findings)} problem(s) in the manifests"
        super().__init__(f"{said}:" + "".join(f"\n  - {f.head()}" for f in findings) if listed else f"{said} (above)")
        self.findings = list(findings)


class ClusterError(PwdeployError):
    """The Kubernetes API refused or failed a request, did not answer in time, or answered with something that is
    not a Kubernetes answer."""

    exit_code = 4


class BuildError(PwdeployError):
    """A container build or push failed, or no engine is reachable."""

    exit_code = 5


class PreflightError(PwdeployError):
    """One or more preflight checks failed."""

    exit_code = 6


class LocalRunError(PwdeployError):
    """The local run could not start, or a job that succeeded never had the slice loss `--lose-slice` asked for
    (otherwise, once it runs, the job's own exit status passes through)."""

    exit_code = 7


class LocalLimitsError(PwdeployError):
    """A local run used more memory or /dev/shm than the config gives its container on the cluster."""

    exit_code = 8


class DiagnosisError(PwdeployError):
    """`pwdeploy diagnose` found at least one finding of severity error (the findings are printed before)."""

    exit_code = 10


class CheckError(PwdeployError):
    """`pwdeploy check` found at least one finding of severity error (the findings are printed before)."""

    exit_code = 11
