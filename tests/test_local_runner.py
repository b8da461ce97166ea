"""The child-process seam of `pwdeploy local run`: start checks, exit statuses, signals, and the job's whole process
tree ending with it (real processes)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psutil
import pytest

from pwdeploy.errors import LocalRunError
from pwdeploy.local.runner import Running, check_startable, exit_status, run_child
from pwdeploy.local.stop_signals import Stops
from tests.conftest import REPO

ENV = dict(os.environ)


def test_exit_status_is_shell_style() -> None:
    assert [exit_status(c) for c in (0, 3, -signal.SIGINT, -signal.SIGKILL)] == [0, 3, 130, 137]


@pytest.mark.parametrize(
    ("command", "message"),
    [
        (["no-such-program-xyz"], "'no-such-program-xyz' not found on PATH (working directory {cwd})"),
        (["./missing.sh"], "'./missing.sh' not found (working directory {cwd})"),
        (["./plain.txt"], "'./plain.txt' is not executable"),
        (["./subdir"], "'./subdir' is not executable"),
    ],
)
def test_commands_that_cannot_start(tmp_path: Path, command: list[str], message: str) -> None:
    (tmp_path / "plain.txt").write_text("not a program\n", encoding="utf-8")
    (tmp_path / "subdir").mkdir()
    with pytest.raises(LocalRunError) as raised:
        check_startable(command, cwd=tmp_path, env=ENV)
    assert raised.value.message == f"cannot start the job: {message.format(cwd=tmp_path)}"


def test_missing_working_directory(tmp_path: Path) -> None:
    with pytest.raises(LocalRunError, match=r"working directory .*gone does not exist"):
        run_child([sys.executable, "-c", "pass"], cwd=tmp_path / "gone", env=ENV)


def test_relative_program_is_found_in_the_working_directory(tmp_path: Path) -> None:
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/sh\nexit 4\n", encoding="utf-8")
    script.chmod(0o755)
    assert run_child(["./job.sh"], cwd=tmp_path, env=ENV).status == 4


def test_the_child_gets_the_default_ctrl_c_handling(tmp_path: Path) -> None:
    """pwdeploy waits with SIGINT handled (not ignored): an ignored signal would stay ignored in the child."""
    code = "import signal, sys; sys.exit(0 if signal.getsignal(signal.SIGINT) is signal.default_int_handler else 5)"
    assert run_child([sys.executable, "-c", code], cwd=tmp_path, env=ENV).status == 0
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # restored afterwards


# Runs in its own interpreter: the SIGTERM goes to that process, so a broken handler kills it, not pytest.
_SIGTERM_WHILE_STARTING = """
import os, signal, subprocess, sys
from pathlib import Path
from pwdeploy.local.runner import run_child

def spawn_after_sigterm(*args, **kwargs):
    os.kill(os.getpid(), signal.SIGTERM)  # arrives while the child is being started
    return subprocess.Popen(*args, **kwargs)

command = [sys.executable, "-c", "import time; time.sleep(30)"]
sys.exit(run_child(command, cwd=Path.cwd(), env=dict(os.environ), spawn=spawn_after_sigterm).status)
"""


def test_sigterm_before_the_child_exists_reaches_it_once_started(tmp_path: Path) -> None:
    env = dict(ENV, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), ENV.get("PYTHONPATH")])))
    done = subprocess.run(
        [sys.executable, "-c", _SIGTERM_WHILE_STARTING], cwd=tmp_path, env=env, capture_output=True, timeout=20
    )
    assert done.returncode == 128 + signal.SIGTERM, done.stderr.decode()


# --- the job's whole process tree ends with it (real processes; /dev/shm is the machine's) ---

# A job that starts processes which ignore SIGTERM: two children, which hold a file it wrote into /dev/shm open,
# and a daemon that leaves the job's session and process group (setsid) and whose parent exits, so that it is
# re-parented. It writes their pids to pids.json, then exits with argv[1] or, given "sleep", sleeps.
TREE = """
import json, os, subprocess, sys, time
shm = f"/dev/shm/pwdeploy-tree-test-{os.getpid()}"
with open(shm, "wb") as f:
    f.write(b"x" * 4096)
with open("shm.txt", "w") as f:
    f.write(shm)
# Each records that SIGTERM reached it (a file sigterm-PID in the working directory) and goes on sleeping; it says
# it is ready (ready-PID) once that handler is in place, and the job waits for all three before it goes on.
stubborn = (
    "import os, signal as s, sys, time; s.signal(s.SIGTERM, lambda *_: open(f'sigterm-{os.getpid()}', 'w').close()); "
    "f = open(sys.argv[-1]); open(f'ready-{os.getpid()}', 'w').close(); time.sleep(60)"
)
kids = [subprocess.Popen([sys.executable, "-c", stubborn, shm]) for _ in range(2)]
quiet = "stdout=s.DEVNULL, stderr=s.DEVNULL"  # the caller waits for its pipe's end
argv = f"[sys.executable, '-c', {stubborn!r}, os.devnull]"
daemon = f"import os, subprocess as s, sys; os.setsid(); print(s.Popen({argv}, {quiet}).pid)"
out = subprocess.run([sys.executable, "-c", daemon], capture_output=True, text=True, check=True).stdout
pids = [k.pid for k in kids] + [int(out)]
while not all(os.path.exists(f"ready-{pid}") for pid in pids):
    time.sleep(0.01)
with open("pids.json.part", "w") as f:  # renamed when whole: the test reads it as soon as it exists
    json.dump(pids, f)
os.replace("pids.json.part", "pids.json")
if sys.argv[1] == "sleep":
    time.sleep(60)
sys.exit(int(sys.argv[1]))
"""


def tree_pids(tmp_path: Path) -> list[int]:
    return [int(pid) for pid in json.loads((tmp_path / "pids.json").read_text())]


def assert_shm_file_removed(tmp_path: Path, removed: tuple[str, ...] | list[str]) -> None:
    """The file the job wrote into /dev/shm is gone and counted (others' may be counted too: /dev/shm is shared)."""
    path = Path((tmp_path / "shm.txt").read_text(encoding="utf-8"))
    assert path.name in removed and not path.exists()


def running(pids: list[int]) -> list[int]:
    """The pids that still name a process (a zombie counts: nobody reaped it)."""
    return [pid for pid in pids if psutil.pid_exists(pid)]


def got_sigterm(tmp_path: Path) -> list[int]:
    """The pids of the processes that recorded a SIGTERM (TREE's stubborn children)."""
    return sorted(int(path.name.removeprefix("sigterm-")) for path in tmp_path.glob("sigterm-*"))


def test_processes_that_ignore_sigterm_end_with_the_job_and_none_is_re_parented(tmp_path: Path) -> None:
    (tmp_path / "tree.py").write_text(TREE, encoding="utf-8")
    ended = run_child([sys.executable, "tree.py", "3"], cwd=tmp_path, env=ENV, leftover_grace=0.5)
    assert ended.status == 3 and ended.stopped_by is None and ended.failed
    assert ended.leftovers == 3  # two children and the daemon that left the job's session
    assert running(tree_pids(tmp_path)) == []
    assert got_sigterm(tmp_path) == sorted(tree_pids(tmp_path)), "each got SIGTERM, and time to heed it, first"
    assert_shm_file_removed(tmp_path, ended.shm_removed)


def test_kill_after_kills_the_whole_tree(tmp_path: Path) -> None:
    (tmp_path / "tree.py").write_text(TREE, encoding="utf-8")
    ended = run_child([sys.executable, "tree.py", "sleep"], cwd=tmp_path, env=ENV, kill_after=2.0)
    assert ended.returncode == -signal.SIGKILL and ended.killed_after == 2.0 and ended.status == 137
    assert ended.cause() == "killed with SIGKILL by --kill-after 2 (exit status 137)"
    assert running(tree_pids(tmp_path)) == []
    assert_shm_file_removed(tmp_path, ended.shm_removed)


# Writes one file into the shared-memory folder argv[1] and closes it (no process holds it afterwards); with
# "hold", also one it keeps open for a second, long enough to be seen holding it.
WRITE_SHM = """
import os, sys, time
open(os.path.join(sys.argv[1], f"closed-{os.getpid()}"), "wb").write(b"z")
if "hold" in sys.argv:
    held = open(os.path.join(sys.argv[1], f"held-{os.getpid()}"), "wb")
    time.sleep(1)
"""


def test_files_the_job_left_in_shared_memory_nobody_else_uses_are_removed(tmp_path: Path) -> None:
    """In a shared-memory folder no other process holds anything in: every new file nobody holds, and only those."""
    shm, here = tmp_path / "shm", tmp_path / "job"
    shm.mkdir()
    here.mkdir()
    (shm / "before").write_bytes(b"x")
    ended = run_child([sys.executable, "-c", WRITE_SHM, str(shm), "hold"], cwd=here, env=ENV, shm_dir=shm)
    assert sorted(name.split("-")[0] for name in ended.shm_removed) == ["closed", "held"]
    assert ended.shm_left_alone == 0
    assert [p.name for p in shm.iterdir()] == ["before"]


def test_while_another_program_uses_shared_memory_only_files_seen_in_the_jobs_hands_are_removed(
    tmp_path: Path,
) -> None:
    """Another program may be handing a block over (created, closed, not yet opened): a new file nobody holds is
    removed only when the job was seen holding it; the others are left and counted."""
    shm, here = tmp_path / "shm", tmp_path / "job"
    shm.mkdir()
    here.mkdir()
    with (shm / "another-programs").open("wb"):  # held by this process, which is not the job
        ended = run_child([sys.executable, "-c", WRITE_SHM, str(shm), "hold"], cwd=here, env=ENV, shm_dir=shm)
    assert [name.split("-")[0] for name in ended.shm_removed] == ["held"]
    assert ended.shm_left_alone == 1
    assert sorted(p.name.split("-")[0] for p in shm.iterdir()) == ["another", "closed"]


def test_fail_at_step_kills_the_job_and_not_the_caller(tmp_path: Path) -> None:
    """runtime.step_done SIGKILLs its own process group: the job runs in a group of its own."""
    code = "from pwdeploy import runtime\nfor step in range(1, 10): runtime.step_done(step)\nprint('not reached')"
    env = dict(ENV, PYTHONPATH=str(REPO), PWDEPLOY_FAIL_AT_STEP="3", PWDEPLOY_RESTART_ATTEMPT="0")
    ended = run_child([sys.executable, "-c", code], cwd=tmp_path, env=env)
    assert ended.returncode == -signal.SIGKILL and ended.cause() == "killed by SIGKILL (exit status 137)"
    after_restart = run_child([sys.executable, "-c", code], cwd=tmp_path, env=dict(env, PWDEPLOY_RESTART_ATTEMPT="1"))
    assert after_restart.status == 0


# Stop signals are sent to a pwdeploy of its own: a broken handler must not kill pytest.
_STOPPED = """
import os, sys
from pathlib import Path
from pwdeploy.local.runner import run_child
ended = run_child([sys.executable, "tree.py", "sleep"], cwd=Path.cwd(), env=dict(os.environ), stop_grace=1.0,
                  leftover_grace=0.5)
print(ended.stopped_by, ended.leftovers, *ended.shm_removed, file=sys.stderr)
sys.exit(ended.status)
"""


@pytest.mark.parametrize(("signum", "status"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_stop_signal_to_pwdeploy_alone_ends_the_whole_tree(tmp_path: Path, signum: int, status: int) -> None:
    """The job's main process ignores neither signal, but its children ignore SIGTERM: all of them end."""
    (tmp_path / "tree.py").write_text(TREE, encoding="utf-8")
    env = dict(ENV, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), ENV.get("PYTHONPATH")])))
    proc = subprocess.Popen(
        [sys.executable, "-c", _STOPPED], cwd=tmp_path, env=env, stderr=subprocess.PIPE, text=True,
        start_new_session=True,
    )  # fmt: skip
    deadline = time.monotonic() + 20
    while not (tmp_path / "pids.json").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    pids = tree_pids(tmp_path)
    proc.send_signal(signum)
    _, err = proc.communicate(timeout=20)
    assert proc.returncode == status, err
    stopped_by, leftovers, *removed = err.splitlines()[-1].split()
    assert (stopped_by, leftovers) == (str(int(signum)), "3")
    assert_shm_file_removed(tmp_path, removed)
    assert running(pids) == []


def test_a_job_that_ignores_the_stop_is_killed_after_the_grace_period(tmp_path: Path) -> None:
    (tmp_path / "tree.py").write_text(
        "import signal, time\nsignal.signal(signal.SIGTERM, lambda *_: open('sigterm', 'w').close())\n"
        "import os\nopen('pids.part', 'w').write('[]')\nos.replace('pids.part', 'pids.json')\ntime.sleep(60)\n",
        encoding="utf-8",
    )
    env = dict(ENV, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), ENV.get("PYTHONPATH")])))
    proc = subprocess.Popen([sys.executable, "-c", _STOPPED], cwd=tmp_path, env=env, start_new_session=True)
    deadline = time.monotonic() + 20
    while not (tmp_path / "pids.json").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=20) == 143
    assert (tmp_path / "sigterm").exists(), "the stop was passed on to the job before it was killed"


def test_a_stop_is_overdue_after_the_grace_period_or_at_a_second_signal() -> None:
    """The grace period, on an injected clock: no stop is overdue, the first is overdue once the grace period
    has passed since it came, and a second one at once."""
    now = [100.0]
    stops = Stops(clock=lambda: now[0])
    assert not stops.overdue(1.0)
    stops.handle(signal.SIGTERM, None)  # no child yet: nothing to pass on
    now[0] = 100.9
    assert not stops.overdue(1.0)
    now[0] = 101.0
    assert stops.overdue(1.0)
    again = Stops(clock=lambda: 0.0)
    again.handle(signal.SIGINT, None)
    assert not again.overdue(30.0)
    again.handle(signal.SIGINT, None)
    assert again.overdue(30.0), "a second Ctrl-C does not wait"


def test_the_tree_is_ended_when_pwdeploy_fails_while_the_job_runs(tmp_path: Path) -> None:
    (tmp_path / "tree.py").write_text(TREE, encoding="utf-8")

    @contextmanager
    def failing_watch(running: Running) -> Iterator[None]:
        deadline = time.monotonic() + 20
        while not (tmp_path / "pids.json").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        raise RuntimeError("the sampler broke")
        yield

    with pytest.raises(RuntimeError, match="the sampler broke"):
        run_child([sys.executable, "tree.py", "sleep"], cwd=tmp_path, env=ENV, watch=failing_watch, leftover_grace=0.5)
    assert running(tree_pids(tmp_path)) == []
    assert not Path((tmp_path / "shm.txt").read_text(encoding="utf-8")).exists(), "the job's /dev/shm file is left"


@pytest.mark.parametrize("pidfd", [True, False], ids=["pidfd", "polled"])
def test_wait_for_exit_gives_the_code_of_an_ended_child_and_none_for_a_running_one(
    pidfd: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """How a local run waits for its job and for the namespace probe: at once through a pidfd, or, where there is
    none (older kernels), Popen's polling wait."""
    from pwdeploy.local.tree import wait_for_exit

    if not pidfd:
        monkeypatch.delattr(os, "pidfd_open", raising=False)
    running = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        assert wait_for_exit(running, 0.05) is None
    finally:
        running.kill()
    assert wait_for_exit(running, 5) == -signal.SIGKILL
    ended = subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"])
    assert wait_for_exit(ended, 30) == 3
    assert wait_for_exit(ended, 30) == 3  # reaped already: the same answer


def test_a_child_ending_on_its_own_just_after_main_is_not_counted_as_left_running_without_namespaces(
    tmp_path: Path,
) -> None:
    """As in a private namespace (test_local_unshare.py): multiprocessing's resource tracker outlives the main
    process by a moment; it is given that moment before what is still running is counted and stopped."""
    program = "import subprocess, sys; subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(0.2)'])"
    ended = run_child([sys.executable, "-c", program], cwd=tmp_path, env=ENV, leftover_grace=2.0)
    assert ended.status == 0 and ended.leftovers == 0
    stays = "import subprocess, sys; subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(30)'])"
    ended = run_child([sys.executable, "-c", stays], cwd=tmp_path, env=ENV, leftover_grace=2.0)
    assert ended.status == 0 and ended.leftovers == 1


def test_the_kernels_children_lists_find_every_descendant_psutil_finds() -> None:
    """JobTree reads pwdeploy's own descendants before the job from /proc/PID/task/TID/children (no psutil import
    before the job starts): the same processes as psutil's scan, children of other threads and grandchildren too."""
    import threading

    from pwdeploy.local.tree import _descendants, _descendants_psutil

    started: list[subprocess.Popen[bytes]] = []
    started.append(subprocess.Popen(["sh", "-c", "sleep 30 & sleep 30 & wait"]))
    thread = threading.Thread(target=lambda: started.append(subprocess.Popen(["sleep", "30"])))
    thread.start()
    thread.join()
    try:
        shell = psutil.Process(started[0].pid)
        deadline = time.monotonic() + 10
        while len(shell.children()) < 2 and time.monotonic() < deadline:  # its two sleeps started
            time.sleep(0.02)
        found = _descendants(os.getpid())
        ours = {process.pid for process in started} | {child.pid for child in shell.children()}
        assert len(ours) == 4 and ours <= set(found) <= set(_descendants_psutil(os.getpid()))
    finally:
        for process in started:
            for child in psutil.Process(process.pid).children():
                child.kill()
            process.kill()
            process.wait()


def test_a_process_is_known_as_pwdeploys_own_by_its_pid_and_start_time() -> None:
    """The tree leaves out what pwdeploy ran before the job (its watchdog), but not a process that got the same
    pid since (its start time differs)."""
    from pwdeploy.local.tree import JobTree, _started

    before = subprocess.Popen(["sleep", "30"])
    try:
        tree = JobTree()
        assert tree._before.get(before.pid) == _started(before.pid) is not None
        assert before.pid not in [p.pid for p in tree.processes()]
        tree._before[before.pid] = 0  # as if the pid had named an older process
        assert before.pid in [p.pid for p in tree.processes()]
    finally:
        before.kill()
        before.wait()
    assert _started(before.pid) is None  # gone


def test_the_job_tree_imports_no_psutil_before_the_job_starts_nor_when_nothing_is_left() -> None:
    """psutil's import (about 15 ms) waits for the sampler, which starts with the job; a run without it (no limits
    check) whose job leaves nothing running never imports it. One that leaves a process does, to end it."""
    code = """import os, sys
from pathlib import Path
from pwdeploy.local.runner import run_child
from pwdeploy.local.tree import JobTree
JobTree()
print('psutil' in sys.modules)
run_child(['true'], cwd=Path('.'), env=dict(os.environ))
print('psutil' in sys.modules)
ended = run_child(['sh', '-c', 'sleep 30 & exit 0'], cwd=Path('.'), env=dict(os.environ), leftover_grace=0.2)
print('psutil' in sys.modules, ended.leftovers)
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True)
    assert done.stdout.split() == ["False", "False", "True", "1"], done.stderr


def test_the_state_read_from_proc_is_psutils() -> None:
    """A zombie, a running process and a gone one, as /proc/PID/stat says and as psutil says."""
    from pwdeploy.local.tree import _started, _zombie

    ended = subprocess.Popen(["true"])
    running = subprocess.Popen(["sleep", "30"])
    try:
        deadline = time.monotonic() + 10
        while psutil.Process(ended.pid).status() != psutil.STATUS_ZOMBIE and time.monotonic() < deadline:
            time.sleep(0.01)
        assert _zombie(ended.pid) and not _zombie(running.pid)
        ticks = _started(running.pid)
        assert ticks is not None
        boot_seconds = ticks / os.sysconf("SC_CLK_TCK")
        assert abs(psutil.boot_time() + boot_seconds - psutil.Process(running.pid).create_time()) < 1.0
    finally:
        running.kill()
        running.wait()
        ended.wait()
    assert not _zombie(ended.pid) and _started(ended.pid) is None  # reaped: gone
