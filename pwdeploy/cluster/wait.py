"""Waiting for a submitted job, with a progress display that rewrites one line on a terminal and prints a
plain line per change otherwise (logs, CI)."""

from __future__ import annotations

import shutil
from typing import Literal, TextIO

from pwdeploy.cluster import jobsets as js
from pwdeploy.cluster.progress import JobState, all_running, job_state, progress, progress_line, running_state
from pwdeploy.errors import ClusterError
from pwdeploy.kube.seam import Kube, reading_answers
from pwdeploy.kube.watch import Mirrors

POLL_S = 2.0  # where watching is forbidden: how often to list the JobSet and its pods
QUIET_S = 60.0  # a look at least this often, changed or not
Until = Literal["running", "done"]  # every expected pod Running, or the job ended


class Display:
    def __init__(self, stream: TextIO, *, tty: bool) -> None:
        self.stream = stream
        self.tty = tty
        self._last: str | None = None

    def update(self, line: str) -> None:
        if line == self._last:
            return
        self._last = line
        if self.tty:
            width = shutil.get_terminal_size((120, 24)).columns - 1
            text = line if len(line) <= width else line[: width - 3] + "..."
            self.stream.write("\r\x1b[K" + text)
        else:
            self.stream.write(line + "\n")
        self.stream.flush()

    def close(self) -> None:
        if self.tty and self._last is not None:
            self.stream.write("\n")
            self.stream.flush()
        self._last = None


def wait_for(
    kube: Kube,
    namespace: str,
    name: str,
    *,
    until: Until,
    display: Display,
    timeout: float | None = None,
    poll: float = POLL_S,
) -> JobState:
    """Follow the job until it runs (``until="running"``: every expected pod Running) or finishes (``"done"``),
    by a watch of the JobSet and one of its pods (a list and a watch each, however long it takes; ``poll``: how
    often to list where watching is forbidden).

    A failed job is a ClusterError; so is a timeout (the job itself is left alone).
    """
    deadline = kube.clock.now() + timeout if timeout else None
    listings = [js.jobset_listing(namespace, name), js.pods_listing(namespace, name)]
    try:
        with Mirrors(kube, listings, poll=poll) as seen:
            return _follow(kube, seen, namespace, name, until, display, deadline, timeout)
    finally:
        display.close()


def _follow(
    kube: Kube,
    seen: Mirrors,
    namespace: str,
    name: str,
    until: Until,
    display: Display,
    deadline: float | None,
    timeout: float | None,
) -> JobState:
    while True:
        jobsets = seen[0]
        if not jobsets:
            raise ClusterError(f"jobset {name} disappeared from namespace {namespace} while waiting (deleted?)")
        jobset = jobsets[0]
        with reading_answers(kube):
            groups = progress(jobset, seen[1])
            state = running_state(jobset, groups) if until == "running" else job_state(jobset)
        display.update(progress_line(state, groups))
        if state.phase == "Failed":
            raise ClusterError(
                f"job {name} failed: {state.reason}: {state.message}".rstrip(": "),
                hint=f"see pwdeploy status {name} -n {namespace} and pwdeploy logs {name} -n {namespace}",
            )
        if state.phase == "Completed" or (until == "running" and all_running(groups)):
            return state
        left = QUIET_S if deadline is None else deadline - kube.clock.now()
        if left <= 0:
            raise ClusterError(
                f"job {name} is not {until} after {timeout:.0f} s (it keeps going: {state.phase})",
                hint=f"follow it with pwdeploy status {name} -n {namespace}",
            )
        seen.wait(left)
