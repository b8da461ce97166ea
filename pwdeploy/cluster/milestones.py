"""The timeline's milestones and events, from what the JobSet, its pods and the namespace's events say at each
look: pods scheduled and disrupted, containers ready and ended (native sidecars, the proxy and the resource
manager, report in initContainerStatuses), pods gone, restarts of the JobSet; each said once. Events are those
about the objects the job owns (by uid: pwdeploy.cluster.job_events), each said once per count it reaches; an
event without a uid of its own (an event source that sets none) is told apart by its name, else by what it
says."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from pwdeploy import identifiers as ids
from pwdeploy.cluster import jobsets as js
from pwdeploy.cluster.job_events import about, event_time
from pwdeploy.cluster.jobsets import Object

Put = Callable[[str, str, str, str], None]  # (kind, time, origin, text): "milestone" or "event"


class Milestones:
    def __init__(self, job: str, put: Put) -> None:
        self.job, self.put = job, put
        self.restarts: int | None = None
        self.facts: dict[str, set[str]] = {}  # pod name -> what was said of it
        self.uids: dict[str, str] = {}  # pod name -> uid
        self.events_seen: set[tuple[str, ...]] = set()
        self.owned: frozenset[str] = frozenset()  # uids of the job's objects seen so far: whose events are its
        self.events_unread = False  # said that the events could not be read

    def own(self, uids: frozenset[str]) -> None:
        self.owned |= uids

    def _job_line(self, time: str, text: str) -> None:
        self.put("milestone", time, "job", text)

    def jobset(self, jobset: Object) -> None:
        restarts = js.restarts(jobset)
        if self.restarts is not None and restarts > self.restarts:
            self._job_line("", f"restart {restarts}: the JobSet recreates every pod (attempt {restarts})")
        self.restarts = restarts

    def pod(self, pod: Object) -> None:
        meta, status = pod.get("metadata") or {}, pod.get("status") or {}
        name = str(meta.get("name"))
        self.uids[name] = str(meta.get("uid") or name)
        facts = self.facts.setdefault(name, set())
        for cond in status.get("conditions") or []:
            fact = f"{cond.get('type')}={cond.get('status')}"
            if cond.get("status") != "True" or fact in facts:
                continue
            facts.add(fact)
            kind, reason = str(cond.get("type")), str(cond.get("reason") or "")
            if kind == "PodScheduled":
                self._job_line(str(cond.get("lastTransitionTime") or ""), f"pod {name} scheduled")
            elif kind == "DisruptionTarget":
                self._job_line(str(cond.get("lastTransitionTime") or ""), f"pod {name} disrupted ({reason})")
        for c in [*(status.get("initContainerStatuses") or []), *(status.get("containerStatuses") or [])]:
            self._container(name, c, facts)

    def _container(self, pod: str, c: dict[str, Any], facts: set[str]) -> None:
        container, restarts = str(c.get("name")), int(c.get("restartCount") or 0)
        if c.get("ready") and f"ready:{container}:{restarts}" not in facts:
            facts.add(f"ready:{container}:{restarts}")
            what = "proxy ready" if container == ids.PROXY_CONTAINER else f"{container} ready"
            self._job_line("", f"pod {pod}: {what}")
        ended = (c.get("state") or {}).get("terminated") or (c.get("lastState") or {}).get("terminated")
        if ended and f"ended:{container}:{ended.get('finishedAt')}" not in facts:
            facts.add(f"ended:{container}:{ended.get('finishedAt')}")
            why = f"exit code {ended.get('exitCode')}" + (f", {ended.get('reason')}" if ended.get("reason") else "")
            self._job_line(str(ended.get("finishedAt") or ""), f"pod {pod}: {container} ended ({why})")

    def gone(self, pods: Iterable[Object]) -> list[str]:
        """The uids of pods seen before and not among ``pods`` now, each said once."""
        names = {str((p.get("metadata") or {}).get("name")) for p in pods}
        went = sorted(n for n in self.facts if n not in names and "gone" not in self.facts[n])
        for name in went:
            self.facts[name].add("gone")
            self._job_line("", f"pod {name} is gone (deleted or evicted)")
        return [self.uids.get(name, name) for name in went]

    def events(self, events: Iterable[Object]) -> None:
        own = [e for e in events if about(e, self.owned)]
        for event in sorted(own, key=event_time):
            key = (*event_key(event), str(event.get("count") or ""))
            if key in self.events_seen:
                continue
            self.events_seen.add(key)
            involved = (event.get("involvedObject") or {}).get("name", "")
            text = f"{event.get('type', '')} {event.get('reason', '')} {involved}: {event.get('message', '')}"
            self.put("event", event_time(event), "event", text)


def event_key(event: Object) -> tuple[str, ...]:
    """Which event this is: its uid; without one its namespace and name; without those what it says and when."""
    meta = event.get("metadata") or {}
    if meta.get("uid"):
        return ("uid", str(meta["uid"]))
    if meta.get("name"):
        return ("name", str(meta.get("namespace") or ""), str(meta["name"]))
    involved = event.get("involvedObject") or {}
    said = (involved.get("kind"), involved.get("name"), event.get("reason"), event.get("message"))
    return ("said", *(str(part or "") for part in said), str(event.get("firstTimestamp") or event_time(event)))
