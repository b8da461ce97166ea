"""`pwdeploy logs NAME --all [-f]`, the job timeline, against DrillStub (a loopback stub, not an API server: every
follow stream it serves ends after what it has, so every stream here drops and must be resumed)."""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from pwdeploy import identifiers as ids
from pwdeploy.cluster.timeline import Entry, Selection, Timeline
from pwdeploy.kube.seam import Kube
from tests.drill_stub import DrillStub, stamp
from tests.fake_clock import FakeClock
from tests.test_drill_stub import NAME, NS, World


@pytest.fixture
def kubeconfig(drill_stub: DrillStub, tmp_path: Path) -> Path:
    return drill_stub.write_kubeconfig(tmp_path / "kc", {"stub": ("stub-token", None)}, current="stub")


def connect(kubeconfig: Path, clock: FakeClock) -> Kube:
    from pwdeploy.kube.kubeconfig import load_kube

    return load_kube(kubeconfig, clock=clock)


def cli(kubeconfig: Path, args: list[str], clock: FakeClock) -> Any:
    from click.testing import CliRunner

    from pwdeploy.cli import cli as pwdeploy
    from pwdeploy.cli.seams import Seams

    seams = Seams(installed_jax=lambda: "0.10.2", clock=clock)
    return CliRunner().invoke(pwdeploy, [*args, "--kubeconfig", str(kubeconfig)], obj=seams)


def worker_lines(world: World, slice_index: int, host: int, texts: list[str], *, at: float, apart: float = 0.0) -> None:
    pod = next(
        p["metadata"]["name"]
        for p in world.pods(ids.WORKER_JOB)
        if p["metadata"]["labels"][ids.JOB_INDEX_LABEL] == str(slice_index)
        and p["metadata"]["labels"][ids.COMPLETION_INDEX_LABEL] == str(host)
    )
    lines = world.stub.timed_logs[(NS, pod, ids.WORKER_CONTAINER)]
    lines += [(stamp(at + i * apart), text) for i, text in enumerate(texts)]  # apart 0: the same-second case


def test_once_every_container_with_its_origin_and_milestones(drill_stub: DrillStub, kubeconfig: Path) -> None:
    world = World(drill_stub)
    worker_lines(world, 1, 0, ["worker up", "\x1b[2Jnot a terminal command"], at=-3.0)
    result = cli(kubeconfig, ["logs", NAME, "--all"], FakeClock())
    assert result.exit_code == 0, result.output
    out = result.stdout.splitlines()
    assert f"[head/{ids.MAIN_CONTAINER}] step 10: loss 0.0010" in out
    assert "[slice-1/host-0/pathways-worker] worker up" in out
    assert "[slice-1/host-0/pathways-worker] ^[[2Jnot a terminal command" in out  # the printable-text rule
    assert any(line.startswith("[job] == pod ") and line.endswith(": proxy ready") for line in out)
    assert sum(" scheduled" in line for line in out) == 1 + 2 * world.hosts


def event(name: str, about: dict[str, Any], reason: str, message: str) -> dict[str, Any]:
    """A Warning event about the object ``about`` (kind, name, uid), as the API server lists it."""
    return {
        "metadata": {"name": name, "namespace": NS},
        "involvedObject": about,
        "type": "Warning",
        "reason": reason,
        "message": message,
        "lastTimestamp": stamp(-1.0),
    }


def test_the_events_are_the_jobs_own_told_apart_by_uid_not_by_name(drill_stub: DrillStub, kubeconfig: Path) -> None:
    """Job dp-example and job dp-example-2 (its pods dp-example-2-...) in one namespace: an event about the other
    job's pod, whose name starts with this job's, is not this job's; one about this job's pod and one about its
    JobSet are."""
    world = World(drill_stub)
    mine = world.pods(ids.WORKER_JOB)[0]["metadata"]
    other = {"kind": "Pod", "name": f"{NAME}-2-{ids.WORKER_JOB}-0-0-zz9", "uid": "uid-of-another-job"}
    jobset = {"kind": "JobSet", "name": NAME, "uid": world.jobset["metadata"]["uid"]}
    drill_stub.put("events", event("e1", {"kind": "Pod", "name": mine["name"], "uid": mine["uid"]}, "OOMKilling", "a"))
    drill_stub.put("events", event("e2", other, "OOMKilling", "the other job's"))
    drill_stub.put("events", event("e3", jobset, "RestartJobSetFailurePolicyAction", "mine"))
    result = cli(kubeconfig, ["logs", NAME, "--all"], FakeClock())
    assert result.exit_code == 0, result.output
    said = [line for line in result.stdout.splitlines() if line.startswith("[event]")]
    assert said == [
        f"[event] event Warning OOMKilling {mine['name']}: a",
        f"[event] event Warning RestartJobSetFailurePolicyAction {NAME}: mine",
    ], said


def test_events_the_api_server_throttles_are_said_once_and_the_timeline_goes_on(
    drill_stub: DrillStub, kubeconfig: Path
) -> None:
    import re

    from tests.kube_stub import Injected

    world = World(drill_stub)
    drill_stub.injected.append(Injected("GET", re.compile(r"/events$"), 429, times=1000))
    result = cli(kubeconfig, ["logs", NAME, "--all"], FakeClock())
    assert result.exit_code == 0, result.output
    out = result.stdout.splitlines()
    assert sum("the job's events could not be read" in line for line in out) == 1, out
    assert f"[head/{ids.MAIN_CONTAINER}] step 10: loss 0.0010" in out and world.hosts


def test_json_one_object_a_line_and_a_selection(drill_stub: DrillStub, kubeconfig: Path) -> None:
    world = World(drill_stub)
    worker_lines(world, 1, 1, ["one", "two"], at=-2.0)
    worker_lines(world, 0, 1, ["elsewhere"], at=-2.0)
    result = cli(kubeconfig, ["logs", NAME, "--all", "--slice", "1", "--host", "1", "-o", "json"], FakeClock())
    assert result.exit_code == 0, result.output
    docs = [json.loads(line) for line in result.stdout.splitlines()]
    logs = [d for d in docs if d["kind"] == "log"]
    assert [(d["origin"], d["text"]) for d in logs] == [("slice-1/host-1/pathways-worker", t) for t in ("one", "two")]
    assert logs[0]["time"] == stamp(-2.0)


def test_a_slice_the_job_does_not_have_says_how_many_there_are(drill_stub: DrillStub, kubeconfig: Path) -> None:
    World(drill_stub)
    for args in (["--component", "worker", "--slice", "5"], ["--all", "--slice", "5"]):
        result = cli(kubeconfig, ["logs", NAME, *args], FakeClock())
        assert result.exit_code == 2, result.output
        assert "has no slice 5: it has 2 (slices 0 to 1)" in result.stderr
        assert "scheduling" not in result.stderr


def test_timeline_flags_need_all(drill_stub: DrillStub, kubeconfig: Path) -> None:
    World(drill_stub)
    for flag in (["--timestamps"], ["-o", "json"]):
        result = cli(kubeconfig, ["logs", NAME, *flag], FakeClock())
        assert result.exit_code == 2 and "applies only to --all" in result.stderr


def caught_up(timeline: Timeline, logs: dict[tuple[str, str, str], list[tuple[str, str]]], wait: float = 5.0) -> None:
    """Wait (real time, bounded) until every source gave the last line its container wrote."""
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        behind = [
            s for s in timeline.sources.values() if (logs.get((NS, s.pod, s.container)) or [("", "")])[-1][0] > s.last
        ]
        if not behind:
            return
        time.sleep(0.01)
    raise AssertionError(f"the timeline did not catch up within {wait} s")


@pytest.mark.parametrize("max_streams", [0, 64], ids=["all polled", "all streamed"])
def test_follow_loses_and_repeats_nothing_through_drops_and_a_restart(
    drill_stub: DrillStub, kubeconfig: Path, max_streams: int
) -> None:
    world: World
    written: list[tuple[str, str]] = []  # (origin, text) as the program wrote them

    def job(sleeps: int) -> None:
        at = clock.t - 1000.0
        if sleeps <= 3:  # lines keep coming, many in the same second as the last one read
            texts = [f"w{sleeps}-{i}" for i in range(3)]
            worker_lines(world, 0, 0, texts, at=at - 0.5)
            written.extend(("slice-0/host-0/pathways-worker" + ("@1" if world.attempt else ""), t) for t in texts)
        if sleeps == 4:
            caught_up(timeline, world.stub.timed_logs)  # the old pods' logs go with them, as on a real server
            world.restart(clock, resume_from=6)
        if sleeps == 5:
            texts = ["after restart"]
            worker_lines(world, 0, 0, texts, at=at)
            written.append(("slice-0/host-0/pathways-worker@1", "after restart"))
        if sleeps == 7:
            world.jobset["status"]["conditions"] = [
                {"type": "Completed", "status": "True", "reason": "AllJobsCompleted"}
            ]

    clock = FakeClock(job)
    world = World(drill_stub)
    got: list[Entry] = []
    timeline = Timeline(connect(kubeconfig, clock), NS, NAME, got.append, max_streams=max_streams, poll=0.01, window=0)
    assert timeline.run() == "Completed"
    worker = [(e.origin, e.text) for e in got if e.kind == "log" and "pathways-worker" in e.origin]
    assert Counter(worker) == Counter(written), "a line was lost or repeated"
    assert [t for o, t in worker if o.endswith("@1")] == ["after restart"]
    texts = [f"{e.origin} {e.text}" for e in got]
    restart_at = next(i for i, t in enumerate(texts) if t.startswith("job restart 1"))
    assert restart_at < texts.index("slice-0/host-0/pathways-worker@1 after restart")
    assert restart_at < texts.index(f"head/{ids.MAIN_CONTAINER}@1 step 6: loss 0.0006")
    assert got[-1].text == "the job is Completed (AllJobsCompleted)"
    gone = [i for i, t in enumerate(texts) if t.endswith("is gone (deleted or evicted)")]
    assert len(gone) == 1 + 2 * world.hosts and max(gone) < texts.index(
        "slice-0/host-0/pathways-worker@1 after restart"
    )
    resumed = [r for r in drill_stub.sent("GET", "/log") if r.q("sinceTime")]
    assert resumed, "no read resumed with sinceTime"


def test_streams_are_capped(drill_stub: DrillStub, kubeconfig: Path) -> None:
    world = World(drill_stub, slices=4)
    clock = FakeClock()
    follows: list[Any] = []

    def count(sleeps: int) -> None:
        follows.append(sum(1 for s in timeline.sources.values() if s.streaming))
        if sleeps == 30:
            world.set_status(0, failed=True)

    clock.on_sleep = count
    timeline = Timeline(connect(kubeconfig, clock), NS, NAME, lambda e: None, max_streams=3, poll=0.01, window=0)
    timeline.run()
    assert len(timeline.sources) == 3 + 4 * world.hosts and 0 < max(follows) <= 3  # main, proxy, rm; the workers


def test_selection() -> None:
    pod: dict[str, Any] = {"metadata": {"labels": {ids.REPLICATED_JOB_LABEL: ids.WORKER_JOB, ids.JOB_INDEX_LABEL: "1",
                                                   ids.COMPLETION_INDEX_LABEL: "0"}}}  # fmt: skip
    assert Selection(slice_index=1).wants(pod, ids.WORKER_CONTAINER)
    assert not Selection(slice_index=0).wants(pod, ids.WORKER_CONTAINER)
    assert not Selection(component="main").wants(pod, ids.WORKER_CONTAINER)
    assert Selection(component="worker", host=0).wants(pod, ids.WORKER_CONTAINER)


def test_follow_from_the_cli_until_the_job_ends(drill_stub: DrillStub, kubeconfig: Path) -> None:
    world: World

    def job(sleeps: int) -> None:
        if sleeps == 2:
            world.set_status(0, failed=True)

    clock = FakeClock(job)
    world = World(drill_stub)
    result = cli(kubeconfig, ["logs", NAME, "--all", "-f", "--timestamps", "--component", "main"], clock)
    assert result.exit_code == 0, result.output
    out = result.stdout.splitlines()
    assert f"{stamp(-10.0)} [head/{ids.MAIN_CONTAINER}] step 1: loss 0.0001" in out
    assert not any("pathways-worker]" in line for line in out)
    assert out[-1] == "- [job] == the job is Failed (FailedJobs)" and f"job {NAME}: Failed" in result.stderr


def test_ctrl_c_stops_the_timeline(drill_stub: DrillStub, kubeconfig: Path) -> None:
    def interrupt(sleeps: int) -> None:
        if threading.current_thread() is threading.main_thread():  # Ctrl-C reaches the main thread only
            raise KeyboardInterrupt

    World(drill_stub)
    result = cli(kubeconfig, ["logs", NAME, "--all", "-f"], FakeClock(interrupt))
    assert result.exit_code == 130 and f"Stopped following; job {NAME} keeps running." in result.stderr


@pytest.mark.parametrize("apart", [1.0, 0.0], ids=["a line a second", "all in one second"])
def test_a_poll_cut_at_its_byte_limit_loses_no_line(
    drill_stub: DrillStub, kubeconfig: Path, monkeypatch: pytest.MonkeyPatch, apart: float
) -> None:
    from pwdeploy.cluster import timeline_reads

    monkeypatch.setattr(timeline_reads, "POLL_LIMIT_BYTES", 200)  # the module's limit, small enough to cut a line
    world = World(drill_stub)
    texts = [f"line {i} " + "x" * 40 for i in range(12)]
    worker_lines(world, 0, 0, texts, at=-20.0, apart=apart)
    got: list[Entry] = []

    def end(sleeps: int) -> None:
        if sleeps == 12:
            world.set_status(0, failed=True)

    clock = FakeClock(end)
    Timeline(
        connect(kubeconfig, clock),
        NS,
        NAME,
        got.append,
        selection=Selection(component="worker", slice_index=0, host=0),
        max_streams=0,
        poll=0.01,
        window=0,
    ).run()
    assert [e.text for e in got if e.kind == "log"] == texts
    limits = {r.q("limitBytes") for r in drill_stub.sent("GET", "/log")}
    assert "200" in limits and None not in limits  # every poll asks for a limit (a bigger one when cut with none)


def test_timestamps_compare_whatever_their_fraction_digits() -> None:
    from pwdeploy.cluster.logs import stamp_key

    assert sorted(["2026-01-01T00:00:05.5Z", "2026-01-01T00:00:05Z", "2026-01-01T00:00:05.12Z"], key=stamp_key) == [
        "2026-01-01T00:00:05Z",
        "2026-01-01T00:00:05.12Z",
        "2026-01-01T00:00:05.5Z",
    ]
