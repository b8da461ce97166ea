"""The options every cluster command shares (--kubeconfig, --context, -n, --region), the cluster they name, and
the one decorator that hands the inspection commands (list, status, logs, delete, ...) a connected cluster."""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from pwdeploy.cli.seams import seams
from pwdeploy.errors import ConfigError

if TYPE_CHECKING:
    from pwdeploy.api import ClientSettings, Cluster
    from pwdeploy.cluster.surroundings import Surroundings
    from pwdeploy.kube.seam import Kube

F = TypeVar("F", bound=Callable[..., Any])
T = TypeVar("T")


def cluster_options(func: F) -> F:
    func = rate_options(func)
    func = click.option(
        "--kubeconfig",
        type=click.Path(dir_okay=False, path_type=Path),
        default=None,
        envvar="PWDEPLOY_KUBECONFIG",
        help="Kubeconfig file (default: $KUBECONFIG, then ~/.kube/config, then in-cluster) [env PWDEPLOY_KUBECONFIG]",
    )(func)
    return click.option(
        "--context",
        default=None,
        envvar="PWDEPLOY_CONTEXT",
        help="Kubeconfig context (default: its current-context) [env PWDEPLOY_CONTEXT]",
    )(func)


def _remember(ctx: click.Context, param: click.Parameter, value: object) -> None:
    """Keep a rate flag's value in the context's meta, where ``client_settings`` reads it (no command sees it)."""
    ctx.meta[f"pwdeploy.{param.name}"] = value


def rate_options(func: F) -> F:
    """``--kube-api-qps`` and ``--kube-api-burst``: the client-side rate limit (pwdeploy.kube.throttle), as
    kube-scheduler's flags of these names."""
    func = click.option(
        "--kube-api-burst",
        "kube_api_burst",
        type=click.IntRange(1, 100_000),
        default=None,
        envvar="PWDEPLOY_KUBE_API_BURST",
        expose_value=False,
        callback=_remember,
        help="Requests sent at once before --kube-api-qps applies (default 100) [env PWDEPLOY_KUBE_API_BURST]",
    )(func)
    return click.option(
        "--kube-api-qps",
        "kube_api_qps",
        type=click.FloatRange(0, 10_000),
        default=None,
        envvar="PWDEPLOY_KUBE_API_QPS",
        expose_value=False,
        callback=_remember,
        help="Requests a second to the API server at most, as client-go limits them (default 50; 0: no limit) "
        "[env PWDEPLOY_KUBE_API_QPS]",
    )(func)


def region_option(func: F) -> F:
    """``--region``: the cluster's GCP region, for preflight's bucket-location check (preflight and submit)."""
    return click.option(
        "--region",
        default=None,
        envvar="PWDEPLOY_REGION",
        help="The cluster's GCP region, e.g. us-central1 (buckets elsewhere get a warning) [env PWDEPLOY_REGION]",
    )(func)


def namespace_option(func: F) -> F:
    return click.option(
        "-n",
        "--namespace",
        default=None,
        envvar="PWDEPLOY_NAMESPACE",  # as job commands read it (the job's `namespace` field)
        help="Namespace (default: the context's namespace) [env PWDEPLOY_NAMESPACE]",
    )(func)


def client_settings() -> ClientSettings:
    """How the client waits: the real clock and bounds, or what the caller passed in the click context object
    (``Seams.clock``, ``Seams.kube_limits``, ``Seams.plugin_limits``: the tests' shorter ones); its rate limit,
    from --kube-api-qps and --kube-api-burst (kept in the context's meta), the environment, else the default."""
    from pwdeploy.api import ClientSettings, RequestLimits
    from pwdeploy.kube.throttle import limit_from

    given = seams()
    requests = None if given.kube_limits is None else RequestLimits(*given.kube_limits)
    ctx = click.get_current_context(silent=True)
    meta = ctx.meta if ctx is not None else {}
    rate = limit_from(meta.get("pwdeploy.kube_api_qps"), meta.get("pwdeploy.kube_api_burst"))
    return ClientSettings(clock=given.clock, requests=requests, plugin=given.plugin_limits, rate=rate)


def open_cluster(kubeconfig: Path | None, context: str | None, namespace: str | None = None) -> Cluster:
    """The cluster the flags name (``api.cluster``); a request or a credential plugin that is slow says so on
    stderr."""
    from pwdeploy import api

    def say(line: str) -> None:
        click.echo(line, err=True)

    return api.cluster(kubeconfig, context, namespace, on_notice=say, settings=client_settings())


def flagged(call: Callable[..., T], *args: Any) -> T:
    """``call(*args)``, whose error names the flag of the argument it is about (--kubeconfig, --context): for an
    error that becomes a line of a report (a preflight row) rather than the command's own error."""
    from pwdeploy.cli.argument_flags import as_flags
    from pwdeploy.errors import PwdeployError

    try:
        return call(*args)
    except PwdeployError as exc:
        shown = as_flags(exc)
        if shown is exc:
            raise
        raise shown from None


def announce(kube: Kube) -> None:
    """The first line of a command that writes to a cluster: which context and server it acts on (stderr), as
    kubectl users check before they apply."""
    from pwdeploy.text import printable

    # The kubeconfig is text from outside too (a context name holding ESC[1A rewrites the line above: the one
    # line that says which cluster is about to change must say it as it is).
    who = f"context {printable(kube.context, 200, one_line=True)}" if kube.context else "the in-cluster service account"
    acting = [printable(value, 200, one_line=True) for name, value in kube.impersonate if name == "Impersonate-User"]
    as_user = f", as {acting[0]} (impersonated)" if acting else ""
    click.echo(f"pwdeploy: {who}, server {printable(kube.host, 500, one_line=True)}{as_user}", err=True)


def surroundings() -> Surroundings:
    """Where the lines of a cluster flow (submit, connect) go: the user's on stderr, the output on stdout, a
    wait's progress on stderr (one line rewritten in place on a terminal); a connect session's command runs in
    the current directory with this process's environment."""
    import sys

    from pwdeploy.cluster.surroundings import Surroundings
    from pwdeploy.cluster.wait import Display

    def say(line: str) -> None:
        click.echo(line, err=True)

    def show(line: str) -> None:
        click.echo(line)

    def display() -> Display:
        return Display(sys.stderr, tty=sys.stderr.isatty())

    def run_command(command: tuple[str, ...], env: Mapping[str, str]) -> int:
        import os

        from pwdeploy.local.runner import run_child

        return run_child(command, cwd=Path.cwd(), env={**os.environ, **env}).status

    return Surroundings(say, show, display, seams().installed_jax, run_command)


def refuse_a_file(name: str, command: str) -> None:
    """A file given where the job's name goes (``logs -f job.yaml``: -f is --follow there, as in kubectl) is
    refused before any request, as the name itself is (``api``'s check)."""
    from pwdeploy.api.cluster_api import check_name

    if name.endswith((".yaml", ".yml", ".json")) or os.path.exists(name):
        follow = " (-f means --follow, as in kubectl)" if command == "logs" else ""
        raise ConfigError(
            None,
            f"{name!r} looks like a file, but {command} takes the job's name{follow}",
            hint=f"pwdeploy {command} JOB_NAME  (the name is the config's `name`; `pwdeploy list` shows them)",
        )
    check_name(name)


def with_cluster(func: F) -> F:
    """Give a command -n/--namespace, --kubeconfig and --context, and call it with ``cluster=api.Cluster(...)``
    instead. A ``name`` argument, when the command has one, and the namespace are checked before connecting."""

    @namespace_option
    @cluster_options
    @functools.wraps(func)
    def command(namespace: str | None, kubeconfig: Path | None, context: str | None, **kwargs: Any) -> Any:
        if isinstance(kwargs.get("name"), str):
            refuse_a_file(kwargs["name"], click.get_current_context().info_name or "pwdeploy")
        from pwdeploy.kube.seam import reading_answers

        cluster = open_cluster(kubeconfig, context, namespace)
        with reading_answers(cluster.kube):
            return func(cluster=cluster, **kwargs)

    return command  # type: ignore[return-value]
