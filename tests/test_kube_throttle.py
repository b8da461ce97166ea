"""The client-side rate limit (pwdeploy.kube.throttle): client-go's token bucket, on every request of a command,
settable by flag and environment; and the User-Agent every request carries (the real API server's view of it:
tests/test_control_plane_watch.py)."""

from __future__ import annotations

import pytest

from pwdeploy.errors import ConfigError
from pwdeploy.kube.throttle import DEFAULT_BURST, DEFAULT_QPS, Limit, Throttle, limit_from
from tests.conftest import ClusterCli
from tests.fake_clock import FakeClock
from tests.kube_objects import rendered_jobset
from tests.kube_stub import StubKubeApiServer


class Stopped:
    """A clock that does not move while requests wait: what threads that take tokens at the same moment see."""

    def __init__(self) -> None:
        self.sleeps: list[float] = []

    def now(self) -> float:
        return 0.0

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)


def test_a_burst_goes_at_once_then_one_request_per_token() -> None:
    clock = FakeClock()
    throttle = Throttle(Limit(qps=2, burst=3), clock)
    assert [throttle.take() for _ in range(5)] == [0, 0, 0, 0.5, 0.5]
    assert clock.sleeps == [0.5, 0.5]
    clock.sleep(10)  # a quiet spell refills the bucket, never beyond the burst
    assert [throttle.take() for _ in range(4)] == [0, 0, 0, 0.5]


def test_requests_that_ask_at_once_are_served_in_turn() -> None:
    throttle = Throttle(Limit(qps=2, burst=1), Stopped())
    assert [throttle.take() for _ in range(4)] == [0, 0.5, 1.0, 1.5]  # each reserves the next token


def test_a_qps_of_zero_is_no_limit() -> None:
    throttle = Throttle(Limit(qps=0, burst=1), FakeClock())
    assert all(throttle.take() == 0 for _ in range(1000))


def test_the_limit_comes_from_the_flag_then_the_environment_then_the_default(monkeypatch: pytest.MonkeyPatch) -> None:
    assert limit_from() == Limit(DEFAULT_QPS, DEFAULT_BURST) == Limit(50.0, 100)
    monkeypatch.setenv("PWDEPLOY_KUBE_API_QPS", "5")
    monkeypatch.setenv("PWDEPLOY_KUBE_API_BURST", "10")
    assert limit_from() == Limit(5.0, 10)
    assert limit_from(20, 40) == Limit(20.0, 40)
    monkeypatch.setenv("PWDEPLOY_KUBE_API_QPS", "lots")
    with pytest.raises(ConfigError, match="'lots' is not a number") as bad:
        limit_from()
    assert bad.value.field == "--kube-api-qps"


def test_a_command_waits_for_its_tokens_and_says_once_that_the_wait_is_its_own_against_stub(
    cluster_cli: ClusterCli, kc: list[str], stub: StubKubeApiServer, clock: FakeClock
) -> None:
    stub.put("jobsets", rendered_jobset("dp-example", "default", tpu_type="v5p-8", slices=2))
    result = cluster_cli(["status", "dp-example", *kc, "--kube-api-qps", "0.5", "--kube-api-burst", "1"])
    assert result.exit_code == 0, result.output
    sent = len(stub.requests)
    assert sent >= 3 and clock.sleeps == [2.0] * (sent - 1)  # one token every 2 s after the first
    told = [line for line in result.stderr.splitlines() if "rate limit" in line]
    assert told == [
        "waited 2.0 s to list pods in namespace 'default': pwdeploy's own rate limit (0.5 requests a second, burst "
        "1; --kube-api-qps, --kube-api-burst), not the API server"
    ], result.stderr


def test_every_request_names_pwdeploy_and_its_version_against_stub(
    cluster_cli: ClusterCli, kc: list[str], stub: StubKubeApiServer
) -> None:
    from pwdeploy import __version__

    cluster_cli(["list", *kc])
    agents = {r.headers.get("User-Agent", "") for r in stub.requests}
    assert len(agents) == 1 and agents.pop().startswith(f"pwdeploy/{__version__} (")
