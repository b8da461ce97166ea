"""What a rule is: a stable id, a severity, the public source it rests on, and a small visitor that yields hits.
The framework turns hits into findings (adding the rule's id, severity, fix and source) and applies the
``# pwdeploy: ignore[rule]`` comments."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from pwdeploy.check.program import Module
from pwdeploy.config import JobConfig
from pwdeploy.severity import Severity

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
JAX_PROFILER = "jax-ml/jax: jax/_src/profiler.py (start_trace: one trace at a time)"
MAXTEXT_ELASTIC = "AI-Hypercomputer/maxtext: elastic training guide (no profiling during recovery)"
ORBAX_PATHWAYS_REGISTRY = (
    "google/orbax: checkpoint/orbax/checkpoint/_src/serialization/pathways_handler_registry.py; google/tunix#2137"
)
GRAIN_LOADER = "google/grain: grain/_src/python/data_loader.py (_determine_worker_count)"


class Hit(NamedTuple):
    """What a visitor saw: where, and the message (what and why, quoting the code); ``fix`` overrides the rule's."""

    file: str
    line: int
    message: str
    fix: str = ""


class Known(NamedTuple):
    """What a rule kept of one module after its tree was dropped: the module's name and file, and the rule's own
    small facts (whatever its ``learn`` returned)."""

    name: str  # dotted: "train", "data.loader"
    file: str  # as findings name it
    facts: Any


@dataclass(frozen=True)
class Context:
    """What the program rules read after every module was read: what each rule kept of each module (in the order
    read, the entry module first), and (with -f) the job config and the rendered manifests' environment."""

    known: dict[str, list[Known]] = field(default_factory=dict)  # rule id -> what it kept, module by module
    entry: str | None = None  # the entry module's name, when there is one
    job: JobConfig | None = None
    config_file: str = ""  # the job config as findings name it
    config_text: str = ""  # its text, to point a finding at the line that sets a value
    main_env: dict[str, str] = field(default_factory=dict)  # the rendered main container's env (literal values)
    container_envs: dict[str, dict[str, str]] = field(default_factory=dict)  # every rendered container's env

    def of(self, rule: str) -> list[Known]:
        return self.known.get(rule, [])

    def config_line(self, text: str) -> int:
        """The first line of the job config holding ``text``; 0 (the whole file) when none does."""
        found = (n for n, line in enumerate(self.config_text.splitlines(), start=1) if text and text in line)
        return next(found, 0)


class Rule(NamedTuple):
    """A rule reads each module while its tree is in memory (``visit``: hits at once; ``learn``: small facts to keep)
    and, when it needs more than one module or the job, decides once every module was read (``judge``)."""

    id: str  # a contract: findings, `-o json` and ignore comments use it
    number: int  # the pattern's number in docs/check.md
    severity: Severity
    summary: str  # one line for the rule table
    fix: str
    source: str
    visit: Callable[[Module], Iterable[Hit]] | None = None
    learn: Callable[[Module], Any] | None = None  # facts kept per module: a few names and lines, never a tree
    judge: Callable[[Context], Iterable[Hit]] | None = None
    needs_job: bool = False  # also reads the job config or its rendered manifests, when -f gives them
    needs_entry: bool = False  # learns only when there is an entry module (what runs first)
