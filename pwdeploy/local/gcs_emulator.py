"""The GCS a local run's job reaches instead of Google's: a real GCS JSON API (gcp-storage-emulator's request
handlers and storage) on 127.0.0.1, in a process of its own, its objects plain files under a folder of the run
(``FOLDER/BUCKET/OBJECT``, with the emulator's ``.meta`` index beside them).

Run as ``python -m pwdeploy.local.gcs_emulator FOLDER [BUCKET ...]``: it makes the buckets that are missing, prints
the port it listens on as one line, and serves until its standard input closes (when the local run that started
it ends, however it ends). Each request is served in turn (one thread): the emulator's storage is not made for
concurrent writers, and the clients retry or wait.
"""

from __future__ import annotations

import os
import sys
import threading
from functools import partial
from http.server import HTTPServer


def serve(folder: str, buckets: list[str]) -> None:
    # gcp-storage-emulator keeps its files in STORAGE_BASE/STORAGE_DIR, read when its settings are imported: "."
    # puts each bucket's objects directly in the run's folder.
    os.environ["STORAGE_DIR"] = "."
    from gcp_storage_emulator.handlers import buckets as bucket_handlers
    from gcp_storage_emulator.server import RequestHandler
    from gcp_storage_emulator.storage import Storage

    storage = Storage(data_dir=os.path.abspath(folder))
    for name in buckets:
        bucket_handlers.create_bucket(name, storage)  # a no-op for one already there
    server = Server(("127.0.0.1", 0), partial(RequestHandler, storage))
    print(server.server_address[1], flush=True)
    threading.Thread(target=_stop_at_eof, args=(server,), daemon=True).start()
    server.serve_forever()
    server.server_close()


class Server(HTTPServer):
    # Connections wait in the kernel's queue while one request is served. HTTPServer's 5 is less than the requests
    # one client makes at once (tensorstore: 32 for an Orbax save): the others were refused and retried with
    # backoff, and a 2-layer MaxText checkpoint took about 65 s.
    request_queue_size = 512


def _stop_at_eof(server: HTTPServer) -> None:
    while sys.stdin.buffer.read(4096):
        pass
    server.shutdown()


if __name__ == "__main__":
    serve(sys.argv[1], sys.argv[2:])
