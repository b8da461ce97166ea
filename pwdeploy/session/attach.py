"""A connect session (`pwdeploy connect`, and the end of `submit --connect`): wait until the headless job's proxy
serves, forward it to 127.0.0.1 through the Kubernetes API (no kubectl), then run a command or hold the forward.

Nothing here prints: each line for the user goes to ``Surroundings.say`` (the CLI writes it on stderr), the export
lines to ``Surroundings.show`` (stdout), and the result is the session's exit status. Running the command belongs
to a room above this one, so the caller passes it in (``Surroundings.run_command``).
"""

from __future__ import annotations

import errno
import shlex
import socket
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, NamedTuple

from pwdeploy.cluster.surroundings import Say, Surroundings
from pwdeploy.errors import ArgumentError, ClusterError
from pwdeploy.text import printable

if TYPE_CHECKING:
    from pwdeploy.kube.port_stream import PortStream
    from pwdeploy.kube.portforward import Forwarder
    from pwdeploy.kube.seam import Kube
    from pwdeploy.session.headless import Head

DEFAULT_LOCAL_PORT = 29000
PROBE_TIMEOUT_S = 30.0  # for the server to announce the port on the first stream
JOB_ENV = "PWDEPLOY_JOB"  # names the job for a command run by connect


class SessionOptions(NamedTuple):
    local_port: int = DEFAULT_LOCAL_PORT
    timeout: float | None = None
    print_env: bool = False
    strict_version: bool = False
    delete_on_exit: bool = False
    command: tuple[str, ...] = ()


def run_session(kube: Kube, namespace: str, name: str, options: SessionOptions, around: Surroundings) -> int:
    """The session: checks, wait, forward, command or hold; its exit status (the command's; 130 for a Ctrl-C
    while waiting; 0 for one while holding the forward)."""
    _check_flags(options, around)
    listener, port, wanted = _first_look(kube, namespace, name, options, around)
    say = _printable(around.say)
    forwarder: Forwarder | None = None
    holding = False
    try:
        head = _wait_ready(kube, namespace, name, port, options.timeout, around)
        if listener is None:
            return _print_env(options.local_port, wanted, around)
        forwarder = _forward(kube, namespace, name, head, listener, say)
        env = session_env(forwarder.port, name, wanted)
        if options.command:
            assert around.run_command is not None  # _check_flags
            say(f"running {shlex.join(options.command)} with JAX_BACKEND_TARGET={env['JAX_BACKEND_TARGET']}")
            return around.run_command(options.command, env)
        _show_exports(forwarder.port, wanted, around)
        say(f"forwarding 127.0.0.1:{forwarder.port} to pod/{head.pod}:{head.port}; Ctrl-C to stop")
        holding = True
        _hold()
        return 0
    except KeyboardInterrupt:
        around.say("")
        return 0 if holding else 130
    finally:
        if forwarder is not None:
            forwarder.close()
        elif listener is not None:
            listener.close()
        _end(kube, namespace, name, say, delete=options.delete_on_exit)


def _first_look(
    kube: Kube, namespace: str, name: str, options: SessionOptions, around: Surroundings
) -> tuple[socket.socket | None, int, dict[str, str]]:
    """(the local port's listener, bound first so that a busy port stops the session at once; the proxy's port;
    the client's environment) of a headless job: one that is not stops here, before anything is started."""
    from pwdeploy.cluster import jobsets as js
    from pwdeploy.session.headless import client_env, proxy_port

    listener = None if options.print_env else bind_local(options.local_port)
    try:
        jobset = js.require_jobset(kube, namespace, name)
        port = proxy_port(jobset)
        _check_version(jobset, options.strict_version, around)
        return listener, port, client_env(jobset)
    except BaseException:
        if listener is not None:
            listener.close()
        raise


def _check_flags(options: SessionOptions, around: Surroundings) -> None:
    if options.print_env and options.command:
        raise ArgumentError("print_env", "prints the variables for another connect's forward; it runs no `command`")
    if options.print_env and options.delete_on_exit:
        raise ArgumentError("delete_on_exit", "would delete the job the connect holding the forward is using")
    if options.print_env and options.local_port == 0:
        raise ArgumentError("local_port", "0 picks a free port, which `print_env` cannot know", hint="pass the port")
    if options.command and around.run_command is None:
        raise ArgumentError("command", "this caller runs no command: pass a run_command to run one")


def bind_local(port: int) -> socket.socket:
    """A listening socket on 127.0.0.1 only (never every interface); a port in use is an ArgumentError naming it."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # a port left in TIME_WAIT is free to reuse
    try:
        listener.bind(("127.0.0.1", port))
    except OSError as exc:
        listener.close()
        if exc.errno in (errno.EADDRINUSE, errno.EACCES):
            raise ArgumentError(
                "local_port",
                f"127.0.0.1:{port} is {'in use' if exc.errno == errno.EADDRINUSE else 'not allowed'}"
                " (another connect or port-forward?)",
                hint="pass another `local_port=N`, or `local_port=0` for any free port",
            ) from None
        raise
    listener.listen(64)
    return listener


def session_env(port: int, name: str, wanted: Mapping[str, str] | None = None) -> dict[str, str]:
    """The client's variables; ``wanted``: what the job's proxy asks of its clients (headless.client_env)."""
    return {"JAX_PLATFORMS": "proxy", "JAX_BACKEND_TARGET": f"grpc://127.0.0.1:{port}", **(wanted or {}), JOB_ENV: name}


def _check_version(jobset: dict[str, Any], strict: bool, around: Surroundings) -> None:
    from pwdeploy.config import installed_jax_version
    from pwdeploy.session.headless import version_warning

    lookup = around.installed_jax or installed_jax_version
    warning = version_warning(jobset, lookup())
    if warning is None:
        return
    if strict:
        raise ArgumentError("strict_version", warning)
    around.say(printable(f"warning: {warning}"))


def _wait_ready(kube: Kube, namespace: str, name: str, port: int, timeout: float | None, around: Surroundings) -> Head:
    from pwdeploy.session.headless import ProxyWatch

    display = around.new_display()
    try:
        watch = ProxyWatch(kube, namespace, name, notify=_printable(around.say))
        return watch.wait(port, timeout=timeout, on_progress=display.update)
    finally:
        display.close()


def _forward(kube: Kube, namespace: str, name: str, head: Head, listener: socket.socket, say: Say) -> Forwarder:
    """Open one stream first (so a refusal, such as RBAC, stops here with its message), then serve."""
    from pwdeploy.kube.portforward import Forwarder
    from pwdeploy.session.headless import HeadStreams, session_notes

    streams = HeadStreams(kube, namespace, name, head, notify=say)  # follows the head pod across restarts
    _probe(streams.open, f"pod/{head.pod}:{head.port}", kube.clock.sleep, say)
    target = f"the proxy of job {name} (port {head.port})"
    notes = session_notes(say, namespace, name, lambda: streams.head.pod)  # a lost connection: a lost session
    return Forwarder(listener, streams.open, notes, target, kube.clock.sleep).start()


def _probe(open_stream: Callable[[], PortStream], target: str, sleep: Callable[[float], None], say: Say) -> None:
    """One stream opened and closed; transient refusals (no answer, 429, 5xx) are retried as the forwarder's."""
    from pwdeploy.kube.port_stream import StreamBroken
    from pwdeploy.kube.portforward import OPEN_RETRY
    from pwdeploy.kube.seam import ApiError, stream_retryable

    for attempt in range(1, OPEN_RETRY.attempts + 1):
        try:
            probe = open_stream()
        except ApiError as exc:
            if not stream_retryable(exc) or attempt == OPEN_RETRY.attempts:
                raise
            say(f"no stream to {target} yet ({exc.message}); retrying in {OPEN_RETRY.delay(attempt):.1f} s")
            sleep(OPEN_RETRY.delay(attempt))
            continue
        try:
            probe.frames.sock.settimeout(PROBE_TIMEOUT_S)  # this stream only: it is closed right after
            probe.started()
        except StreamBroken as exc:
            raise ClusterError(f"the port-forward stream to {target} failed: {exc}") from None
        finally:
            probe.close()
        return


def _print_env(port: int, wanted: Mapping[str, str], around: Surroundings) -> int:
    probe = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    probe.settimeout(1.0)
    if probe.connect_ex(("127.0.0.1", port)) != 0:
        around.say(
            printable(
                f"nothing listens on 127.0.0.1:{port} yet: hold the forward with `pwdeploy connect` in another shell"
            )
        )
    probe.close()
    _show_exports(port, wanted, around)
    return 0


def _show_exports(port: int, wanted: Mapping[str, str], around: Surroundings) -> None:
    env = session_env(port, "", wanted)
    env.pop(JOB_ENV)
    for name, value in env.items():
        around.show(f"export {name}={shlex.quote(value)}")


def _hold() -> None:
    """Until Ctrl-C, SIGTERM or SIGHUP, each a clean stop (so --delete-on-exit still deletes)."""
    import signal
    import threading
    from types import FrameType

    def stop(_signum: int, _frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    previous = {signum: signal.signal(signum, stop) for signum in (signal.SIGTERM, signal.SIGHUP)}
    try:
        threading.Event().wait()
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def _end(kube: Kube, namespace: str, name: str, say: Say, *, delete: bool) -> None:
    """Delete the job (--delete-on-exit), or remind that it keeps its TPUs: the last line on stderr."""
    from pwdeploy.cluster import jobsets as js

    if not delete:
        say(f"job {name} keeps its TPUs until deleted: pwdeploy delete {name} -n {namespace}")
        return
    try:
        jobset = js.get_jobset(kube, namespace, name)
        if jobset is not None and not js.is_managed(jobset):
            say(f"jobset {name} is not managed by pwdeploy; not deleting it")
            return
        js.delete_jobset(kube, namespace, name)
    except ClusterError as exc:  # the session's own outcome (the command's status, its error) stays the result
        say(f"error: could not delete job {name} (--delete-on-exit): {exc}")
        say(f"job {name} keeps its TPUs until deleted: pwdeploy delete {name} -n {namespace}")
        return
    say(f"deleted job {name} in namespace {namespace} (--delete-on-exit); its pods stop in the background")


def _printable(say: Say) -> Say:
    """``say`` for lines that may quote the API server's or a stream's text."""
    return lambda line: say(printable(line))
