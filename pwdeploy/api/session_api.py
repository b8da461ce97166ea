"""A running job's session through the API server's port-forward: a headless job's proxy on 127.0.0.1
(``connect_session``, `pwdeploy connect`) and an on-demand trace of a job's program (``profile``) (docs/api.md,
"Sessions")."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pwdeploy.api.cluster_api import check_name, given_cluster
from pwdeploy.api.job_api import say_to
from pwdeploy.identifiers import PROFILER_PORT

if TYPE_CHECKING:
    from typing import TextIO

    from pwdeploy.api.cluster_api import Cluster
    from pwdeploy.cluster.surroundings import Surroundings
    from pwdeploy.session.attach import SessionOptions
    from pwdeploy.session.profiling import Capture


def connect_session(
    cluster: Cluster, name: str, options: SessionOptions | None = None, *, surroundings: Surroundings | None = None
) -> int:
    """`pwdeploy connect`: wait until the headless job's IFRT proxy serves, forward it to 127.0.0.1 through the
    API server (``options.local_port``, 0: any free port), then run ``options.command`` with JAX pointed at it
    (``surroundings.run_command`` runs it) or hold the forward until Ctrl-C; with ``options.print_env``, only tell
    the export lines. Returns the session's exit status (the command's). The lines for the user go to
    ``surroundings.say``, the export lines to ``surroundings.show`` (default: nowhere). A job that is not headless
    is a ``ConfigError``; with ``options.delete_on_exit`` the job is deleted when the session ends."""
    from pwdeploy.cluster.surroundings import Surroundings
    from pwdeploy.kube.seam import reading_answers
    from pwdeploy.session.attach import SessionOptions, run_session

    check_name(name)
    kube, namespace = given_cluster(cluster)
    with reading_answers(kube):
        return run_session(kube, namespace, name, options or SessionOptions(), surroundings or Surroundings())


def profile(
    cluster: Cluster,
    name: str,
    *,
    duration: float,
    port: int = PROFILER_PORT,
    hosts: int = 1,
    progress: TextIO | None = None,
) -> Capture:
    """`pwdeploy profile`: a trace of ``duration`` seconds of the running job's program, written to its
    storage.profiles by pathwaysutils' profiler server on ``port`` of the head pod, asked through the API
    server's port-forward. ``progress`` hears when tracing begins. The ``Capture`` says where the trace is
    (``trace_dir``, ``log_dir`` for TensorBoard). A job without storage.profiles, a headless job and a request
    the server cannot carry out (more than one host) are ``ConfigError``s; a job whose program does not run, or
    a server that does not answer, is a ``ClusterError``."""
    from pwdeploy import arguments
    from pwdeploy.kube.seam import reading_answers
    from pwdeploy.session.profiling import plan, run

    check_name(name)
    kube, namespace = given_cluster(cluster)
    seconds = arguments.seconds(duration, "duration")
    assert seconds is not None  # duration is required
    with reading_answers(kube):
        planned = plan(
            kube,
            namespace,
            name,
            duration_s=seconds,
            port=arguments.whole(port, "port", 1),
            hosts=arguments.whole(hosts, "hosts", 1),
        )
        say_to(progress)(f"tracing job {name} for {seconds:g} s (profiler port {port}, pod/{planned.pod}) ...")
        return run(kube, planned)
