"""``python -m tests.control_plane run FOLDER``: start the control plane in FOLDER, write FOLDER/env (the
KUBECONFIG lines to source) and keep it up until SIGTERM or Ctrl-C (scripts/control-plane.sh start|stop|env)."""

from __future__ import annotations

import signal
import sys
import threading
from pathlib import Path

from tests.control_plane import binaries, pki
from tests.control_plane.cluster import start
from tests.control_plane.processes import StartError


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] != "run":
        print("usage: python -m tests.control_plane run FOLDER", file=sys.stderr)
        return 2
    folder = Path(argv[1])
    if not folder.exists() and not folder.is_symlink():
        folder.mkdir(mode=0o700)  # a folder someone else made is refused by the plane (cluster.check_private)
    try:
        plane = start(binaries.build(), folder)
    except (StartError, binaries.BuildError) as e:
        print(f"control-plane: {e}", file=sys.stderr)
        return 1
    stopped = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda *_: stopped.set())
    text = (
        f"export KUBECONFIG={plane.admin_kubeconfig}\n"
        f"# the namespace-scoped user: KUBECONFIG={plane.user_kubeconfig}\n"
        f"# logs: {plane.logs}\n"
    )
    pki.private_file(folder / "env", text.encode())
    print(f"control-plane: up in {plane.started_in:.1f} s; KUBECONFIG={plane.admin_kubeconfig}", file=sys.stderr)
    try:
        stopped.wait()
    finally:
        plane.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
