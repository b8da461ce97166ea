"""What a rule is: a stable id, a severity, the public source it rests on, and a small visitor that yields hits.
The framework turns hits into findings (adding the rule's id, severity, fix and source) and applies the
``# pwdeploy: ignore[rule]`` comments."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import NamedTuple

from pwdeploy.check.findings import Severity
from pwdeploy.check.program import Module, Program
from pwdeploy.config import JobConfig

# The public pages and code the rules rest on (each rule names one; docs/check.md lists them with the rules).
PORTING = "https://cloud.google.com/ai-hypercomputer/docs/workloads/pathways-on-cloud/porting-jax-workloads"
PW_INIT = "AI-Hypercomputer/pathways-utils: pathwaysutils/_initialize.py"
PW_PROFILING = "AI-Hypercomputer/pathways-utils: pathwaysutils/profiling.py (_validate_path)"
PW_VALIDATORS = (
    "AI-Hypercomputer/pathways-utils: pathwaysutils/experimental/shared_pathways_service/validators.py "
    "(validate_sidecar_image_versions)"
)
PW_ELASTIC = "AI-Hypercomputer/pathways-utils: pathwaysutils/elastic/manager.py (Manager.elastic_retry docstring)"
ORBAX_HANDLER = "google/orbax: checkpoint/orbax/checkpoint/_src/serialization/cloud_pathways_array_handler.py"
ORBAX_TYPES = "google/orbax: checkpoint/orbax/checkpoint/_src/serialization/pathways_types.py (CheckpointingImpl)"
ORBAX_MULTIHOST = "google/orbax: checkpoint/orbax/checkpoint/_src/multihost/multihost.py"
MAXTEXT_DISTRIBUTED = "AI-Hypercomputer/maxtext: max_utils.maybe_initialize_jax_distributed_system"
MAXTEXT_RL = "AI-Hypercomputer/maxtext: post-training RL recipes (JAX_PLATFORMS=proxy,cpu)"
GRAIN_LOADER = "google/grain: grain/_src/python/data_loader.py (_determine_worker_count)"


class Hit(NamedTuple):
    """What a visitor saw: where, and the message (what and why, quoting the code); ``fix`` overrides the rule's."""

    file: str
    line: int
    message: str
    fix: str = ""


@dataclass(frozen=True)
class Context:
    """What the rules read: the program, and (with -f) the job config and the rendered manifests' environment."""

    program: Program
    job: JobConfig | None = None
    config_file: str = ""  # the job config as findings name it
    config_text: str = ""  # its text, to point a finding at the line that sets a value
    main_env: dict[str, str] = field(default_factory=dict)  # the rendered main container's env (literal values)
    container_envs: dict[str, dict[str, str]] = field(default_factory=dict)  # every rendered container's env

    @property
    def modules(self) -> list[Module]:
        return self.program.modules

    def config_line(self, text: str) -> int:
        """The first line of the job config holding ``text``; 0 (the whole file) when none does."""
        found = (n for n, line in enumerate(self.config_text.splitlines(), start=1) if text and text in line)
        return next(found, 0)


class Rule(NamedTuple):
    id: str  # a contract: findings, `-o json` and ignore comments use it
    number: int  # the pattern's number in docs/check.md
    severity: Severity
    summary: str  # one line for the rule table
    fix: str
    source: str
    check: Callable[[Context], Iterable[Hit]]
    needs_job: bool = False  # also reads the job config or its rendered manifests, when -f gives them


def per_module(visit: Callable[[Module], Iterable[Hit]]) -> Callable[[Context], Iterable[Hit]]:
    """A visitor of one module, run over every module read."""

    def check(context: Context) -> Iterable[Hit]:
        for module in context.modules:
            yield from visit(module)

    return check
