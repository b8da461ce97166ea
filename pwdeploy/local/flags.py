"""XLA flags for the CPU backend: keep what it knows, drop TPU-only flags (XLA aborts on unknown flags)."""

from __future__ import annotations

# Families of flags that only libtpu (or the Pathways/megascale runtime) defines. The open-source XLA in
# jaxlib rejects them at start-up ("Unknown flags in XLA_FLAGS").
TPU_ONLY_PREFIXES = (
    "xla_tpu_",
    "xla_jf_",
    "xla_sc_",
    "xla_vf_",
    "xla_megascale_",
    "megascale_",
    "tpu_",
    "xla_enable_async_",
    "xla_pf_",
    "xla_mosaic_on_device_checks",
)
# TPU-only flags outside those families, as they appear in common TPU training recipes.
TPU_ONLY_NAMES = frozenset(
    {
        "xla_latency_hiding_scheduler_rerun",
        "xla_should_allow_loop_variant_parameter_in_chain",
        "xla_should_add_loop_invariant_op_in_chain",
        "xla_max_concurrent_host_send_recv",
        "xla_enable_transpose_trace",
    }
)
# Set by `local run` itself; a config value would fight the emulated device count.
LOCAL_OWNED = frozenset({"xla_force_host_platform_device_count"})


def flag_name(flag: str) -> str:
    """``--xla_tpu_foo=1`` -> ``xla_tpu_foo``."""
    return flag.lstrip("-").split("=", 1)[0]


def is_tpu_only(flag: str) -> bool:
    name = flag_name(flag)
    return name in TPU_ONLY_NAMES or name.startswith(TPU_ONLY_PREFIXES)


def split_cpu_flags(flags: tuple[str, ...] | list[str]) -> tuple[list[str], list[str]]:
    """(flags the CPU backend gets, TPU-only flags dropped); flags ``local run`` sets itself are left out."""
    kept: list[str] = []
    dropped: list[str] = []
    for flag in flags:
        if flag_name(flag) in LOCAL_OWNED:
            continue
        (dropped if is_tpu_only(flag) else kept).append(flag)
    return kept, dropped
