"""The head pod as a session needs it: `main` starts once the proxy listens (its startup probe, after the resource
manager), and pathwaysutils' profiler server stays on the node's loopback unless the config opens it."""

from __future__ import annotations

from typing import Any

import pytest

from pwdeploy import identifiers as ids
from pwdeploy import manifests
from pwdeploy.envcontract import PROFILING_HOST_ENV
from pwdeploy.errors import ConfigError
from tests.kube_objects import small_job


def head_spec(overrides: dict[str, Any] | None = None) -> dict[str, Any]:
    (obj,) = manifests.build(small_job(overrides))
    head = next(rj for rj in obj["spec"]["replicatedJobs"] if rj["name"] == ids.HEAD_JOB)
    spec: dict[str, Any] = head["template"]["spec"]["template"]["spec"]
    return spec


def env_of(container: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e.get("value", "") for e in container.get("env", [])}


def test_the_proxy_probe_holds_main_back_and_nothing_the_proxy_needs() -> None:
    spec = head_spec()
    rm, proxy = spec["initContainers"]
    assert (rm["name"], proxy["name"]) == (ids.RM_CONTAINER, ids.PROXY_CONTAINER)  # the proxy registers with the RM
    assert "startupProbe" not in rm and all(c["restartPolicy"] == "Always" for c in (rm, proxy))
    probe = proxy["startupProbe"]
    assert probe["tcpSocket"] == {"port": proxy["ports"][0]["containerPort"]}
    assert probe["periodSeconds"] * probe["failureThreshold"] >= 600  # a slow proxy start is not a restart


def test_a_headless_head_has_no_probe_to_wait_on() -> None:
    spec = head_spec({"headless": True, "main.image": None, "main.command": None})
    assert "initContainers" not in spec
    assert all("startupProbe" not in c for c in spec["containers"])


def test_the_profiler_server_binds_the_loopback_by_default() -> None:
    (main,) = head_spec()["containers"]
    assert env_of(main)[PROFILING_HOST_ENV] == "127.0.0.1"


def test_the_profiler_server_opens_only_when_asked() -> None:
    (main,) = head_spec({"main.profiler_host": "0.0.0.0"})["containers"]
    assert env_of(main)[PROFILING_HOST_ENV] == "0.0.0.0"


def test_the_users_own_env_still_wins() -> None:
    (main,) = head_spec({"main.env": {PROFILING_HOST_ENV: "::1"}})["containers"]
    names = [e["name"] for e in main["env"]]
    assert env_of(main)[PROFILING_HOST_ENV] == "::1" and names.count(PROFILING_HOST_ENV) == 1


def test_another_profiler_address_names_the_field() -> None:
    with pytest.raises(ConfigError, match=r"main\.profiler_host"):
        small_job({"main.profiler_host": "10.0.0.1"})
