"""Where work and outputs go: profiles to a local path (7), host-CPU computation without a CPU backend (8)."""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator
from typing import NamedTuple

from pwdeploy.check.program import Module, env_writes, literal_str
from pwdeploy.check.rule import MAXTEXT_RL, PW_PROFILING, Context, Hit, Rule
from pwdeploy.envcontract import proxy_env

TRACE = frozenset({"jax.profiler.start_trace", "jax.profiler.trace", "pathwaysutils.profiling.start_trace"})
LOCAL_DIRS = frozenset({"pathlib.Path", "tempfile.mkdtemp", "tempfile.gettempdir", "os.getcwd", "pathlib.Path.cwd"})


def _local_path(module: Module, node: ast.AST) -> bool:
    """A path known to be local before the program runs: a literal, an f-string's leading text, Path(...)."""
    text = literal_str(node)
    if isinstance(node, ast.JoinedStr) and node.values:
        text = literal_str(node.values[0])
    if text is not None:
        return bool(text) and not text.startswith("gs://")
    return module.called(node) in LOCAL_DIRS


def profile_path(module: Module) -> Iterator[Hit]:
    for call, name in module.calls():
        if name not in TRACE:
            continue
        target = call.args[0] if call.args else next((k.value for k in call.keywords if k.arg == "log_dir"), None)
        if target is not None and _local_path(module, target):
            yield Hit(
                module.shown,
                call.lineno,
                f"{module.code(call)} writes the profile to a local path: on "
                'Pathways the trace is collected by pathwaysutils, which requires a gs:// path ("Path must be '
                'a GCS path")',
            )


CPU_ASKING = frozenset(
    {"jax.devices", "jax.local_devices", "jax.device_count", "jax.local_device_count", "jax.extend.backend.get_backend"}
)


def _asks_for_cpu(module: Module, call: ast.Call, name: str) -> bool:
    backend = next((k.value for k in call.keywords if k.arg == "backend"), None)
    if name in CPU_ASKING and call.args and backend is None:
        backend = call.args[0]
    return backend is not None and literal_str(backend) == "cpu" and (name in CPU_ASKING or name in _JITS)


_JITS = frozenset({"jax.jit", "jax.pmap"})


class CpuUse(NamedTuple):
    """What ``host-cpu-backend`` keeps of a module."""

    platform: bool | None  # whether the module adds the CPU platform (None: it does not say)
    asks: tuple[tuple[int, str], ...]  # (line, code) of each call that asks for the CPU backend


def cpu_use(module: Module) -> CpuUse:
    asks = tuple((c.lineno, module.code(c)) for c, name in module.calls() if _asks_for_cpu(module, c, name))
    return CpuUse(_sets_cpu_platform(module), asks)


def _sets_cpu_platform(module: Module) -> bool | None:
    """Whether the module adds the CPU platform (``JAX_PLATFORMS=proxy,cpu`` or ``jax_platforms``)."""
    for _, key, value in env_writes(module):
        if key == "JAX_PLATFORMS" and "cpu" in (literal_str(value) or "cpu").split(","):
            return True
    for call, name in module.calls():
        if name == "jax.config.update" and len(call.args) == 2 and literal_str(call.args[0]) == "jax_platforms":
            return "cpu" in (literal_str(call.args[1]) or "cpu").split(",")
    return None


def host_cpu(context: Context) -> Iterable[Hit]:
    known = context.of("host-cpu-backend")
    platforms = context.main_env.get("JAX_PLATFORMS") if context.job is not None else None
    where = "the rendered main container"
    if platforms is None:
        platforms, where = proxy_env()["JAX_PLATFORMS"], "pwdeploy's main container"
    # The first module that says decides, as the first of them to run would.
    if "cpu" in platforms.split(",") or next((k.facts.platform for k in known if k.facts.platform is not None), False):
        return
    for k in known:
        for line, code in k.facts.asks:
            yield Hit(
                k.file,
                line,
                f"{code} asks for the host CPU backend, but {where} has JAX_PLATFORMS={platforms}: there is no CPU "
                "backend to give",
            )


RULES = (
    Rule(
        "profile-local-path",
        7,
        "error",
        "jax.profiler.start_trace/trace to a local path",
        "profile to a gs:// path: os.environ['PWDEPLOY_PROFILE_DIR'] (storage.profiles)",
        PW_PROFILING,
        profile_path,
    ),
    Rule(
        "host-cpu-backend",
        8,
        "error",
        "host CPU computation (jax.devices('cpu'), backend='cpu') while JAX_PLATFORMS is proxy only",
        "set os.environ['JAX_PLATFORMS'] = 'proxy,cpu' before importing jax (as MaxText's RL recipes run), or "
        "keep the computation on the accelerators",
        MAXTEXT_RL,
        learn=cpu_use,
        judge=host_cpu,
        needs_job=True,
    ),
)
