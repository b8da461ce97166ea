"""Finding the cluster the way kubectl does: --kubeconfig, then $KUBECONFIG, then ~/.kube/config, then the
in-cluster service account; --context picks a context, whose namespace is the default one."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from pwdeploy.cluster.api import GET_CREDENTIALS, Clock, Kube, RetryPolicy, SystemClock
from pwdeploy.errors import ClusterError, ConfigError

SERVICE_ACCOUNT_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


def kubeconfig_location(kubeconfig: Path | None) -> str | None:
    """The kubeconfig path(s) to load, or None when there is none (then only in-cluster config can work)."""
    if kubeconfig is not None:
        if not kubeconfig.expanduser().is_file():
            raise ConfigError("--kubeconfig", f"{kubeconfig} does not exist or is not a file")
        return str(kubeconfig.expanduser())
    from_env = os.environ.get("KUBECONFIG", "")
    if from_env.strip():
        if not any(Path(p).expanduser().is_file() for p in from_env.split(os.pathsep) if p):
            raise ConfigError(None, f"KUBECONFIG={from_env} names no existing file", hint=GET_CREDENTIALS)
        return from_env
    default = Path("~/.kube/config").expanduser()
    return str(default) if default.is_file() else None


def load_kube(
    kubeconfig: Path | None = None,
    context: str | None = None,
    *,
    clock: Clock | None = None,
    retry: RetryPolicy | None = None,
) -> Kube:
    """A ``Kube`` for the chosen kubeconfig context, or the in-cluster identity when there is no kubeconfig."""
    from kubernetes import client

    location = kubeconfig_location(kubeconfig)
    configuration = client.Configuration()
    if location is not None:
        context, namespace = _load_kubeconfig(location, context, configuration, flag_given=kubeconfig is not None)
    elif os.environ.get("KUBERNETES_SERVICE_HOST"):
        if context is not None:
            raise ConfigError("--context", f"{context!r} needs a kubeconfig, and none was found")
        namespace = _load_in_cluster(configuration)
    else:
        raise ClusterError(
            "no kubeconfig found ($KUBECONFIG is unset and ~/.kube/config does not exist) and not running in a pod",
            hint=f"fetch credentials ({GET_CREDENTIALS}) or pass --kubeconfig PATH",
        )
    configuration.retries = False  # Kube.request owns retries (with backoff); urllib3's own would double them
    # Readiness checks send up to 16 requests at once; the client's default pool (5 per CPU) would drop connections.
    configuration.connection_pool_maxsize = max(configuration.connection_pool_maxsize or 0, 16)
    return Kube(
        client.ApiClient(configuration),
        context=context,
        namespace=namespace,
        clock=clock or SystemClock(),
        retry=retry or RetryPolicy(),
    )


def _load_kubeconfig(location: str, context: str | None, configuration: Any, *, flag_given: bool) -> tuple[str, str]:
    import yaml
    from kubernetes import config
    from kubernetes.config.config_exception import ConfigException

    try:
        contexts, active = config.list_kube_config_contexts(config_file=location)  # type: ignore[no-untyped-call]
    except (ConfigException, yaml.YAMLError, OSError, TypeError, AttributeError) as exc:
        if isinstance(exc, (TypeError, AttributeError)):  # the client indexes into whatever the YAML holds
            reason = "it is not a kubeconfig (a YAML mapping with clusters, contexts and users)"
        else:
            reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        message = f"cannot read kubeconfig {location}: {reason}"
        if flag_given:
            raise ConfigError("--kubeconfig", message) from None
        raise ClusterError(message, hint=GET_CREDENTIALS) from None
    names = [c["name"] for c in contexts or []]
    chosen = next((c for c in contexts or [] if c["name"] == context), None) if context else active
    if context is not None and chosen is None:
        raise ConfigError("--context", f"{context!r} is not a context in {location}; available: {', '.join(names)}")
    if not chosen:
        raise ConfigError("--context", f"{location} sets no current-context; pass one of: {', '.join(names)}")
    try:
        config.load_kube_config(  # type: ignore[no-untyped-call]
            config_file=location, context=chosen["name"], client_configuration=configuration, persist_config=False
        )
    except (ConfigException, OSError, ValueError) as exc:
        raise ClusterError(
            f"cannot use context {chosen['name']!r} of {location}: {exc}", hint=GET_CREDENTIALS
        ) from None
    namespace = (chosen.get("context") or {}).get("namespace") or "default"
    return str(chosen["name"]), str(namespace)


def _load_in_cluster(configuration: Any) -> str:
    from kubernetes import config
    from kubernetes.config.config_exception import ConfigException

    try:
        config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
    except ConfigException as exc:
        raise ClusterError(f"cannot use the in-cluster service account: {exc}") from None
    try:
        return SERVICE_ACCOUNT_NAMESPACE.read_text(encoding="utf-8").strip() or "default"
    except OSError:
        return "default"
