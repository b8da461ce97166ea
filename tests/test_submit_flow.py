"""`submit`'s flow as a function (pwdeploy.cluster.deploy), against StubKubeApiServer (a loopback stub, not an API
server): nothing printed, every line through the caller's surroundings, the outcome and what to do next as data."""

from __future__ import annotations

from functools import partial

import pytest

from pwdeploy import api
from pwdeploy.cluster.deploy import DeployOptions, submit_job
from pwdeploy.cluster.submit import DryRun
from pwdeploy.cluster.surroundings import Surroundings
from pwdeploy.config import JobConfig
from pwdeploy.errors import PreflightError
from pwdeploy.kube.seam import Kube
from pwdeploy.session.attach import SessionOptions, run_session
from tests.conftest import REPO
from tests.fake_clock import FakeClock
from tests.kube_stub import StubKubeApiServer

EXAMPLE = REPO / "examples" / "data_parallel" / "job.yaml"  # dp-example


def example(**overrides: object) -> JobConfig:
    return api.load(EXAMPLE, overrides, installed_jax=lambda: "0.10.2")  # the example's images are for jax 0.10.2


class Heard:
    def __init__(self) -> None:
        self.said: list[str] = []
        self.shown: list[str] = []

    def surroundings(self) -> Surroundings:
        return Surroundings(say=self.said.append, show=self.shown.append)


def test_a_submit_tells_its_caller_and_prints_nothing(
    kube: Kube, stub: StubKubeApiServer, capsys: pytest.CaptureFixture[str]
) -> None:
    heard = Heard()
    checked = []

    def preflight(job: JobConfig) -> list[str]:
        checked.append(job.namespace)
        return ["warning: gcs gs://bucket: \x1b]0;planted\x07 in another region"]

    done = submit_job(
        kube,
        example()._replace(namespace=None),
        DeployOptions(),
        heard.surroundings(),
        confirm=lambda q: False,
        preflight=preflight,
    )
    assert capsys.readouterr() == ("", "")
    assert checked == ["default"]  # the config names none: the context's, before the checks
    assert heard.said == ["warning: gcs gs://bucket: ^[]0;planted^G in another region"]
    assert heard.shown == [done.outcome.describe(DryRun.NONE)] and done.outcome.result == "created"
    assert (done.status, done.state) == (0, None)
    assert done.next_steps == (
        "follow: pwdeploy status dp-example -n default  |  pwdeploy logs dp-example -n default -f",
    )
    assert stub.get("jobsets", "default", "dp-example") is not None


def test_a_headless_job_is_told_how_to_connect(kube: Kube) -> None:
    done = submit_job(kube, example(headless=True), DeployOptions(), Heard().surroundings(), confirm=lambda q: False)
    assert done.next_steps[0].startswith("Headless job: connect JAX to its IFRT proxy")
    assert "  pwdeploy connect dp-example -n default -- python3 explore.py" in done.next_steps


def test_a_failed_preflight_submits_nothing(kube: Kube, stub: StubKubeApiServer) -> None:
    def preflight(job: JobConfig) -> list[str]:
        raise PreflightError("preflight failed; nothing was submitted")

    with pytest.raises(PreflightError):
        submit_job(
            kube, example(), DeployOptions(), Heard().surroundings(), confirm=lambda q: True, preflight=preflight
        )
    assert stub.writes() == []


def test_a_dry_run_says_what_it_would_do_and_no_next_steps(kube: Kube, stub: StubKubeApiServer) -> None:
    heard = Heard()
    options = DeployOptions(dry_run=DryRun.CLIENT, wait="running")  # a dry run creates nothing to wait for
    done = submit_job(kube, example(), options, heard.surroundings(), confirm=lambda q: False)
    assert (done.status, done.state, done.next_steps) == (0, None, ())
    assert heard.shown == [done.outcome.describe(DryRun.CLIENT)] and stub.writes() == []


@pytest.mark.parametrize("connect", [None, SessionOptions(local_port=0)])
def test_ctrl_c_while_waiting_is_status_130_and_leaves_the_job(
    kube: Kube, stub: StubKubeApiServer, clock: FakeClock, connect: SessionOptions | None
) -> None:
    def interrupt(polls: int) -> None:
        raise KeyboardInterrupt

    clock.on_sleep = interrupt
    heard = Heard()
    around = heard.surroundings()
    session = None if connect is None else partial(run_session, options=connect, around=around)
    options = DeployOptions(wait=None if connect else "done", connect=session)  # --connect waits until it runs
    done = submit_job(kube, example(headless=connect is not None), options, heard.surroundings(), confirm=bool)
    assert (done.status, done.state, done.next_steps) == (130, None, ())
    assert heard.said[-1].startswith("\nStopped waiting; job dp-example keeps running.")
    assert "  stop it:   pwdeploy delete dp-example -n default" in heard.said[-1]
    assert [w.method for w in stub.writes()] == ["PATCH"] and stub.get("jobsets", "default", "dp-example")


def test_the_api_submit_is_the_same_flow_in_the_clusters_namespace(kube: Kube, stub: StubKubeApiServer) -> None:
    job = example()._replace(namespace=None)  # the config names none: the Cluster's, not the context's
    outcome = api.submit(api.Cluster(kube, "team"), job)
    assert (outcome.namespace, outcome.result) == ("team", "created")
    assert stub.get("jobsets", "team", "dp-example") is not None
    again = api.submit(api.Cluster(kube, "team"), job)
    assert again.result == "unchanged" and again.config_hash == outcome.config_hash


def test_a_session_command_without_a_runner_is_refused_before_anything(kube: Kube, stub: StubKubeApiServer) -> None:
    from pwdeploy.errors import ConfigError

    options = SessionOptions(local_port=0, command=("python3", "explore.py"))
    with pytest.raises(ConfigError, match="pass a run_command"):
        run_session(kube, "default", "dp-example", options, Heard().surroundings())
    assert stub.sent() == []
