"""Finding the cluster the way kubectl does: --kubeconfig, then $KUBECONFIG (several files, merged as kubectl
merges them: pwdeploy.kube.kubeconfig_files), then ~/.kube/config, then the in-cluster service account; --context
picks a context, whose namespace is the default one. Credential plugins are run here, before any request
(pwdeploy.kube.credential_plugin); proxies, TLS and plain-http servers are decided as kubectl decides them
(pwdeploy.kube.reach). The HTTP client (pwdeploy.kube.http_client) is configured from the one resolved context.

A kubeconfig is input: one that is missing, not YAML (the file and line YAML names) or not usable is a ConfigError
(exit 2) naming the file. Secrets in it never reach output: a bearer token loses the surrounding whitespace YAML
block scalars add (``token: |``) and one with a space or line break inside is refused without being shown; a
server URL's ``user:password@`` is dropped (the client never sent it) and never shown."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

from pwdeploy.errors import ArgumentError, ClusterError, ConfigError
from pwdeploy.kube.answers import without_userinfo
from pwdeploy.kube.credential_plugin import Credential, PluginToken, client_certificate, plugin_of
from pwdeploy.kube.http_client import (
    ApiClient,
    Configuration,
    InClusterUnavailable,
    configure,
    configure_in_cluster,
    file_token,
)
from pwdeploy.kube.impersonation import impersonation_headers
from pwdeploy.kube.kubeconfig_files import Origin, Resolved, kubeconfig_files, merge, resolve
from pwdeploy.kube.plugin_run import NOTICE_AFTER, PLUGIN_TIMEOUT, run_plugin
from pwdeploy.kube.reach import check_tls, credentials_of, kubectl_proxy, plain_http, usable_ca
from pwdeploy.kube.seam import GET_CREDENTIALS, Clock, Kube, RequestLimits, RetryPolicy, SystemClock
from pwdeploy.kube.throttle import Limit, Throttle, limit_from

SERVICE_ACCOUNT_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


def kubeconfig_location(kubeconfig: Path | None) -> str | None:
    """The kubeconfig path(s) to load, or None when there is none (then only in-cluster config can work)."""
    if kubeconfig is not None:
        if not kubeconfig.expanduser().is_file():
            raise ArgumentError("kubeconfig", f"{kubeconfig} does not exist or is not a file")
        return str(kubeconfig.expanduser())
    from_env = os.environ.get("KUBECONFIG", "")
    if from_env.strip():
        if not any(Path(p).expanduser().is_file() for p in from_env.split(os.pathsep) if p):
            raise ConfigError(None, f"KUBECONFIG={from_env} names no existing file", hint=GET_CREDENTIALS)
        return from_env
    default = Path("~/.kube/config").expanduser()
    return str(default) if default.is_file() else None


class PluginLimits(NamedTuple):
    """How long a credential plugin may take (``timeout``) and when the user hears that it is slow."""

    timeout: float = PLUGIN_TIMEOUT
    notice_after: float = NOTICE_AFTER


def load_kube(
    kubeconfig: Path | None = None,
    context: str | None = None,
    *,
    clock: Clock | None = None,
    retry: RetryPolicy | None = None,
    on_notice: Callable[[str], None] | None = None,
    plugin_limits: PluginLimits | None = None,
    request_limits: RequestLimits | None = None,
    on_wait: Callable[[str], None] | None = None,
    rate: Limit | None = None,
) -> Kube:
    """A ``Kube`` for the chosen kubeconfig context, or the in-cluster identity when there is no kubeconfig, built
    whole: ``on_notice`` hears what the user should know on the way (a slow credential plugin, credentials not
    sent), ``on_wait`` that a request is slow; ``request_limits`` bound each request (default: the seam's);
    ``rate``: the client-side rate limit (pwdeploy.kube.throttle; None: the environment's, else the default)."""
    configuration = Configuration()
    clock = clock or SystemClock()
    found = _identity(kubeconfig, context, configuration, clock, on_notice, plugin_limits or PluginLimits())
    context, namespace, impersonate = found
    # Readiness checks send up to 16 requests at once: the pool keeps 16 connections (Kube.request owns retries).
    configuration.connection_pool_maxsize = max(configuration.connection_pool_maxsize, 16)
    limits = request_limits or RequestLimits()
    return Kube(
        ApiClient(configuration),
        context=context,
        namespace=namespace,
        clock=clock,
        retry=retry or RetryPolicy(),
        timeout=limits.timeout,
        deadline=limits.deadline,
        slow_after=limits.slow_after,
        on_wait=on_wait,
        impersonate=impersonate,
        throttle=Throttle(rate or limit_from(), clock),
    )


def _identity(
    kubeconfig: Path | None,
    context: str | None,
    configuration: Configuration,
    clock: Clock,
    on_notice: Callable[[str], None] | None,
    plugin_limits: PluginLimits,
) -> tuple[str | None, str, tuple[tuple[str, str], ...]]:
    """(context, namespace, Impersonate-* headers) of the kubeconfig's chosen context, or of the pod's service
    account when there is no kubeconfig, with ``configuration`` set up for it."""
    location = kubeconfig_location(kubeconfig)
    if location is not None:
        origin = _origin(location, flag_given=kubeconfig is not None)
        paths = [Path(location).expanduser()] if kubeconfig is not None else kubeconfig_files(location)
        resolved = resolve(merge(paths, origin), context, origin)
        whose = f"{origin.location}: user {resolved.user_name!r}"
        impersonate = impersonation_headers(resolved.user, whose)  # checked before a credential plugin runs
        _configure(resolved, origin, configuration, clock, on_notice, plugin_limits)
        return resolved.context, resolved.namespace, impersonate
    if os.environ.get("KUBERNETES_SERVICE_HOST"):
        if context is not None:
            raise ArgumentError("context", f"{context!r} needs a kubeconfig, and none was found")
        return context, _load_in_cluster(configuration), ()
    raise ConfigError(
        None,
        f"no kubeconfig found: $KUBECONFIG is unset, {Path('~/.kube/config').expanduser()} does not exist, and "
        "this is not a pod with a service account",
        hint=f"fetch credentials ({GET_CREDENTIALS}) or pass --kubeconfig PATH",
    )


def _origin(location: str, *, flag_given: bool) -> Origin:
    if flag_given:
        return Origin("kubeconfig", None, location)
    return Origin(None, "KUBECONFIG" if os.environ.get("KUBECONFIG", "").strip() else None, location)


def _configure(
    resolved: Resolved,
    origin: Origin,
    configuration: Configuration,
    clock: Clock,
    on_notice: Callable[[str], None] | None,
    limits: PluginLimits,
) -> None:
    """Configure the client from the one context (credentials as kubectl would send them) and the proxy."""
    whose = f"{origin.location}: user {resolved.user_name!r} (context {resolved.context!r})"
    server = str(resolved.cluster["server"])
    where = f"{origin.location}: cluster {resolved.cluster_name!r}"
    check_tls(resolved.cluster, where)
    resolved = resolved._replace(cluster=usable_ca(resolved.cluster, where))  # before a plugin hears it
    proxy = kubectl_proxy(server, resolved.cluster.get("proxy-url"))  # checked before a plugin runs
    user, token = _credentials(resolved, whose, clock, on_notice, limits)
    try:
        configure(configuration, resolved.cluster, user, whose)
    except ConfigError as exc:  # the message never quotes a user value
        raise origin.error(
            f"cannot use context {resolved.context!r} of {origin.location}: {exc.message}",
            hint=exc.hint or GET_CREDENTIALS,
        ) from None
    if token is not None:
        token.apply(configuration)
    elif (from_file := file_token(user, configuration, clock.now)) is not None:
        from_file.apply(configuration)
    # The proxy as kubectl picks it, set explicitly (never NO_PROXY's word over a kubeconfig's proxy-url, never a
    # proxy for a loopback server): pwdeploy.kube.reach.
    configuration.proxy = proxy
    configuration.no_proxy = None
    clean_credentials(configuration, whose)


def _credentials(
    resolved: Resolved,
    whose: str,
    clock: Clock,
    on_notice: Callable[[str], None] | None,
    limits: PluginLimits,
) -> tuple[dict[str, Any], PluginToken | None]:
    """The user entry to hand the client, and the plugin token that replaces its exec entry (if any)."""
    user = resolved.user
    server = str(resolved.cluster["server"])
    if plain_http(server):
        if credentials_of(user) and on_notice is not None:
            on_notice(
                f"pwdeploy: {without_userinfo(server)} is plain http, so the credentials of {whose} are not sent "
                "(as kubectl sends none); use the server's https:// URL"
            )
        return {}, None
    plugin = plugin_of(user, whose, resolved.cluster)
    if plugin is None:
        return user, None

    def fetch() -> Credential:
        return run_plugin(plugin, timeout=limits.timeout, notice_after=limits.notice_after, on_notice=on_notice)

    credential = fetch()
    rest = {k: v for k, v in user.items() if k != "exec"}
    if credential.token is None:
        return {**rest, **client_certificate(credential)}, None
    return rest, PluginToken(credential, fetch, clock.utc_now)


def clean_credentials(configuration: Configuration, whose: str) -> None:
    """Drop the server URL's userinfo and check the bearer token now and whenever the client refreshes it."""
    configuration.host = without_userinfo(str(configuration.host))
    refresh = configuration.refresh_api_key_hook

    def refreshed(conf: Configuration) -> None:
        if refresh is not None:
            refresh(conf)  # the client's hook sets the raw token again, and itself as the hook
            conf.refresh_api_key_hook = refreshed
        _clean_token(conf, whose)

    configuration.refresh_api_key_hook = refreshed
    _clean_token(configuration, whose)


def _clean_token(configuration: Configuration, whose: str) -> None:
    value = configuration.api_key.get("BearerToken")
    if not value:
        return
    scheme, _, token = str(value).partition(" ")
    token = token.strip()  # a token file's trailing newline, YAML's `token: |`
    if not token or any(c.isspace() or not c.isprintable() for c in token):
        raise ConfigError(
            None,
            f"{whose}: the token is empty or has a space or line break inside it (a bearer token is one word)",
            hint=f"fetch fresh credentials ({GET_CREDENTIALS})",
        )
    configuration.api_key["BearerToken"] = f"{scheme} {token}"


def _load_in_cluster(configuration: Configuration) -> str:
    try:
        configure_in_cluster(configuration)
    except InClusterUnavailable as exc:
        raise ClusterError(f"cannot use the in-cluster service account: {exc}") from None
    try:
        return SERVICE_ACCOUNT_NAMESPACE.read_text(encoding="utf-8").strip() or "default"
    except OSError:
        return "default"
