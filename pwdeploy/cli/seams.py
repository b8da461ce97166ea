"""What a caller (the tests) puts in place of the real things, passed as the click context object. Apart from
options.py so that the cluster commands, which read no job config, do not import the config to find them."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, NamedTuple

import click

if TYPE_CHECKING:
    from pwdeploy.kube.kubeconfig import PluginLimits
    from pwdeploy.kube.seam import Clock


class KubeLimits(NamedTuple):
    """Shorter bounds for each Kubernetes API request than the real ones (``Kube``'s fields of these names)."""

    timeout: tuple[float, float]  # (connect, read) seconds per attempt
    deadline: float  # seconds for one request, retries included
    slow_after: float  # seconds before a request is announced as slow


class Seams(NamedTuple):
    """What a caller (the tests) puts in place of the real thing, passed as the click context object
    (``cli.main(obj=Seams(...))``); each None means the real one."""

    clock: Clock | None = None  # the Kubernetes client's sleeps and waits
    installed_jax: Callable[[], str | None] | None = None  # the installed jax version
    cores: int | None = None  # the CPU cores this process may use
    kube_limits: KubeLimits | None = None
    plugin_limits: PluginLimits | None = None  # a credential plugin's bounds (kube.kubeconfig.PluginLimits)


def seams() -> Seams:
    """The seams the caller passed in the click context object; none (the real things) otherwise."""
    ctx = click.get_current_context(silent=True)
    obj = ctx.find_root().obj if ctx is not None else None
    return obj if isinstance(obj, Seams) else Seams()
