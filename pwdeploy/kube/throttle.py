"""The client-side rate limit every request to the API server passes, as client-go's: a token bucket of ``qps``
tokens a second holding at most ``burst`` (k8s.io/client-go rest.Config's QPS and Burst, enforced by
util/flowcontrol's token-bucket limiter over golang.org/x/time/rate), taken before each request is sent: a list
page, a watch, a log stream, a WebSocket upgrade, every retry.

client-go's defaults are 5 a second with a burst of 10 (rest/config.go: DefaultQPS, DefaultBurst), what kubectl
sends its requests with (it raises only discovery's, to 50 and 300). pwdeploy's are kube-scheduler's (its
--kube-api-qps 50, --kube-api-burst 100): a command that waits or follows costs a watch, not a stream of lists,
so the limit binds only where a command must read many objects one by one (``logs --all`` reads each container's
log: 2,050 reads for a 1,024-pod job take 41 s at 50 a second, 410 s at kubectl's 5). ``PWDEPLOY_KUBE_API_QPS``
and ``PWDEPLOY_KUBE_API_BURST`` set them (``--kube-api-qps``/``--kube-api-burst`` on every cluster command); a
QPS of 0 turns the limit off (client-go: a negative QPS). API Priority and Fairness on the server throttles what
gets through (429 and its Retry-After are honoured by ``Kube``'s retries)."""

from __future__ import annotations

import os
import threading
from typing import NamedTuple, Protocol

from pwdeploy.errors import ConfigError

DEFAULT_QPS = 50.0
DEFAULT_BURST = 100
QPS_ENV = "PWDEPLOY_KUBE_API_QPS"
BURST_ENV = "PWDEPLOY_KUBE_API_BURST"
TOLD_AFTER_S = 1.0  # a wait this long is said (client-go logs "Waited for ... due to client-side throttling")


class Ticking(Protocol):
    def now(self) -> float: ...

    def sleep(self, seconds: float) -> None: ...


class Limit(NamedTuple):
    """Requests a second (0: no limit) and how many may go at once after a quiet spell."""

    qps: float = DEFAULT_QPS
    burst: int = DEFAULT_BURST

    def describe(self) -> str:
        return f"{self.qps:g} requests a second, burst {self.burst}" if self.qps > 0 else "no limit"


def limit_from(qps: str | float | None = None, burst: str | int | None = None) -> Limit:
    """The limit given (a flag's value), else the environment's, else the default; a value that is not a number in
    range is a ``ConfigError`` naming where it came from."""
    qps_given = qps if qps is not None else os.environ.get(QPS_ENV) or None
    burst_given = burst if burst is not None else os.environ.get(BURST_ENV) or None
    rate = _number(qps_given, "--kube-api-qps", QPS_ENV, float) if qps_given is not None else DEFAULT_QPS
    size = _number(burst_given, "--kube-api-burst", BURST_ENV, int) if burst_given is not None else DEFAULT_BURST
    if rate < 0 or rate > 10_000:
        raise ConfigError("--kube-api-qps", f"{rate:g} is not between 0 (no limit) and 10000 [env {QPS_ENV}]")
    if size < 1 or size > 100_000:
        raise ConfigError("--kube-api-burst", f"{size} is not between 1 and 100000 [env {BURST_ENV}]")
    return Limit(rate, int(size))


def _number(value: str | float | int, flag: str, env: str, kind: type[float] | type[int]) -> float:
    try:
        return kind(value)
    except (TypeError, ValueError):
        raise ConfigError(flag, f"{value!r} is not a number [env {env}]") from None


class Throttle:
    """The token bucket, shared by every thread of one ``Kube``: ``take`` reserves the next token under the lock
    and sleeps until it is due outside it, so waiting threads are served in the order they came (x/time/rate's
    reservations)."""

    def __init__(self, limit: Limit, clock: Ticking) -> None:
        self.limit, self.clock = limit, clock
        self._tokens = float(limit.burst)
        self._at = clock.now()
        self._lock = threading.Lock()
        self.waited = 0.0  # seconds, all threads together, spent waiting for a token

    def take(self) -> float:
        """Wait for a token; the seconds waited."""
        if self.limit.qps <= 0:
            return 0.0
        with self._lock:
            now = self.clock.now()
            self._tokens = min(float(self.limit.burst), self._tokens + (now - self._at) * self.limit.qps)
            self._at = now
            self._tokens -= 1.0
            wait = -self._tokens / self.limit.qps if self._tokens < 0 else 0.0
            self.waited += wait
        if wait > 0:
            self.clock.sleep(wait)
        return wait
