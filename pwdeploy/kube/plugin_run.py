"""Running a credential plugin's process (pwdeploy.kube.credential_plugin): found on PATH, started in a session of
its own with ``KUBERNETES_EXEC_INFO``, its stdout and stderr read within bounds of time and size, stopped with what
it started; a failure is an error that says what to do, quoting its stderr masked."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pwdeploy.errors import ClusterError, ConfigError
from pwdeploy.kube.credential_plugin import Credential, Plugin, read_credential
from pwdeploy.text import masked

if TYPE_CHECKING:
    import subprocess

PLUGIN_TIMEOUT = 60.0  # seconds a plugin may take before the command stops
NOTICE_AFTER = 2.0  # seconds before the user hears what the command waits for
MAX_QUOTED = 1500  # characters of a plugin's stderr an error quotes
MAX_OUTPUT = 1 << 20  # bytes of stdout read: an ExecCredential, even with a client certificate, is a few KiB
MAX_STDERR = 64 << 10  # bytes of stderr kept (an error quotes its first MAX_QUOTED characters)
EXIT_GRACE = 1.0  # seconds the pipes are still read once the plugin has exited
POLL_S = 0.1  # the longest a wait for output goes without looking whether the plugin has exited


def run_plugin(
    plugin: Plugin,
    *,
    timeout: float = PLUGIN_TIMEOUT,
    notice_after: float = NOTICE_AFTER,
    on_notice: Callable[[str], None] | None = None,
) -> Credential:
    """Run the plugin once and read its ExecCredential; every failure is an error that says what to do."""
    process = _start(plugin)
    try:
        out, err = _output(process, plugin, timeout, notice_after, on_notice)
    finally:
        _kill(process)  # a plugin that outlived its answer, or a timeout; nothing when it ended
    if process.returncode != 0:
        raise ClusterError(
            f"the credential plugin {plugin.name} of {plugin.whose} failed (exit status {process.returncode}); "
            f"no request was sent{_quoted(err)}",
            hint=plugin.hint(),
        )
    return read_credential(plugin, out)


def _output(
    process: subprocess.Popen[bytes],
    plugin: Plugin,
    timeout: float,
    notice_after: float,
    on_notice: Callable[[str], None] | None,
) -> tuple[bytes, bytes]:
    """The plugin's stdout and stderr, read until both end, within ``timeout`` seconds (one notice after
    ``notice_after``). Once the plugin itself has exited the pipes are read for ``EXIT_GRACE`` seconds more at
    most: a process it left behind holding them (a daemon) is not waited for."""
    import subprocess
    import time

    start = time.monotonic()
    output = _Output(process, plugin)
    _read_until_closed(process, plugin, output, start, timeout, notice_after, on_notice)
    try:  # a plugin that closed its pipes and goes on running is given what is left of the timeout
        process.wait(timeout=max(0.0, timeout - (time.monotonic() - start)))
    except subprocess.TimeoutExpired:
        raise ClusterError(
            f"the credential plugin {plugin.name} of {plugin.whose} did not exit within {timeout:g} s; "
            "no request was sent",
            hint=plugin.hint(),
        ) from None
    return output.out(), output.err()


def _read_until_closed(
    process: subprocess.Popen[bytes],
    plugin: Plugin,
    output: _Output,
    start: float,
    timeout: float,
    notice_after: float,
    on_notice: Callable[[str], None] | None,
) -> None:
    """Read the plugin's pipes until both close, or ``EXIT_GRACE`` seconds after the plugin exited; a
    ClusterError past ``timeout``."""
    import selectors
    import time

    ended_at = None
    notice = None if on_notice is None or notice_after >= timeout else start + notice_after
    with selectors.DefaultSelector() as selector:
        for fd in output.streams:
            selector.register(fd, selectors.EVENT_READ)
        while selector.get_map():
            now = time.monotonic()
            if notice is not None and now >= notice and on_notice is not None:
                notice = None
                on_notice(f"pwdeploy: waiting for the credential plugin {plugin.name} of {plugin.whose} "
                          f"(giving up after {timeout:g} s)")  # fmt: skip
            if now - start >= timeout:
                raise ClusterError(
                    f"the credential plugin {plugin.name} of {plugin.whose} did not answer within {timeout:g} s; "
                    "no request was sent",
                    hint=plugin.hint(),
                )
            ended_at = ended_at if ended_at is not None or process.poll() is None else now
            if ended_at is not None and now - ended_at >= EXIT_GRACE:
                break
            for key, _ in selector.select(timeout=POLL_S):
                if not output.read(key.fd):
                    selector.unregister(key.fd)


class _Output:
    """What the plugin printed so far: more than ``MAX_OUTPUT`` bytes on stdout is an error, stderr beyond
    ``MAX_STDERR`` is dropped."""

    def __init__(self, process: subprocess.Popen[bytes], plugin: Plugin) -> None:
        assert process.stdout is not None and process.stderr is not None
        self._out_fd, self._err_fd = process.stdout.fileno(), process.stderr.fileno()
        self.streams = {self._out_fd: bytearray(), self._err_fd: bytearray()}
        self._plugin = plugin

    def read(self, fd: int) -> bool:
        """Read what ``fd`` has; False at its end."""
        chunk = os.read(fd, 1 << 16)
        kept = self.streams[fd]
        if fd == self._out_fd and len(kept) + len(chunk) > MAX_OUTPUT:
            raise ClusterError(
                f"the credential plugin {self._plugin.name} of {self._plugin.whose} printed more than "
                f"{MAX_OUTPUT >> 20} MiB on stdout, not an ExecCredential; no request was sent",
                hint=self._plugin.hint(),
            )
        if fd == self._out_fd or len(kept) < MAX_STDERR:
            kept += chunk
        return bool(chunk)

    def out(self) -> bytes:
        return bytes(self.streams[self._out_fd])

    def err(self) -> bytes:
        return bytes(self.streams[self._err_fd])


def _start(plugin: Plugin) -> subprocess.Popen[bytes]:
    import shutil  # only a kubeconfig with a credential plugin needs it

    env = {**os.environ, **plugin.env}
    executable = plugin.command if "/" in plugin.command else shutil.which(plugin.command, path=env.get("PATH"))
    if executable is None or not Path(executable).is_file():
        where = "is not on PATH" if "/" not in plugin.command else "does not exist"
        raise ConfigError(
            None, f"{plugin.whose}: the credential plugin {plugin.command!r} {where}", hint=plugin.hint(missing=True)
        )
    exec_info: dict[str, Any] = {"apiVersion": plugin.api_version, "kind": "ExecCredential", "spec": {}}
    exec_info["spec"]["interactive"] = False
    if plugin.cluster_info is not None:
        exec_info["spec"]["cluster"] = plugin.cluster_info
    env["KUBERNETES_EXEC_INFO"] = json.dumps(exec_info)
    try:
        import subprocess

        return subprocess.Popen(
            [executable, *plugin.args],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            start_new_session=True,  # a plugin that hangs is stopped with the children it started (gcloud, ...)
        )
    except OSError as exc:
        raise ConfigError(
            None,
            f"{plugin.whose}: the credential plugin {plugin.command!r} cannot be started: {exc.strerror or exc}",
            hint=plugin.hint(missing=True),
        ) from None


def _kill(process: subprocess.Popen[bytes]) -> None:
    """End the plugin's session (what it started with it) if it is still running, reap it and close its pipes:
    never waits for what they carry (a process that left the session may hold them for ever)."""
    import signal

    if process.poll() is None:
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except OSError:
            process.kill()
        process.wait()
    for pipe in (process.stdout, process.stderr):
        if pipe is not None:
            pipe.close()


def _quoted(err: bytes) -> str:
    from pwdeploy.kube.answers import printable

    text = printable(masked(err.decode("utf-8", "replace").strip()), MAX_QUOTED)
    if not text:
        return " and printed nothing on stderr"
    return ". It said:\n" + "\n".join(f"    {line}" for line in text.splitlines() if line.strip())
