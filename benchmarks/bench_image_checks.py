"""Wall time of preflight's image checks: N images checked at once (thread pool) against one after another.

The images are the first N tags found in a registry's catalog (default the local registry on 127.0.0.1:5000; the
docker tests push some there), or the references given with --image. Each run checks every image with a fresh
client, as `pwdeploy preflight` does; the median of --runs runs is reported per mode.

A local registry answers in a millisecond or two, far faster than a registry across a network. ``--delay-ms D``
adds D ms before every answer (a loopback proxy in front of the local registry) to see the checks at a distance.

Usage: python3 benchmarks/bench_image_checks.py [--registry 127.0.0.1:5000] [--count 4] [--runs 20] [--delay-ms D]
       [--image REF ...]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from pwdeploy.preflight.image_checks import check_image
from pwdeploy.registry.client import RegistryClient
from pwdeploy.registry.credentials import Credentials
from pwdeploy.report import Status


def discover(registry: str, count: int) -> list[str]:
    """The first ``count`` image references in the registry's catalog."""
    with urllib.request.urlopen(f"http://{registry}/v2/_catalog", timeout=5) as answer:
        repositories = json.load(answer)["repositories"]
    found: list[str] = []
    for repository in repositories:
        with urllib.request.urlopen(f"http://{registry}/v2/{repository}/tags/list", timeout=5) as answer:
            tags = json.load(answer).get("tags") or []
        found.extend(f"{registry}/{repository}:{tag}" for tag in tags)
        if len(found) >= count:
            return found[:count]
    sys.exit(f"only {len(found)} image(s) in {registry}; push more (e.g. run tests/test_preflight_images.py)")


@contextmanager
def delaying_proxy(registry: str, delay: float) -> Iterator[str]:
    """A loopback HTTP proxy to ``registry`` that waits ``delay`` seconds before each answer; yields host:port."""

    class Handler(BaseHTTPRequestHandler):
        def _forward(self) -> None:
            time.sleep(delay)
            headers = {k: v for k, v in self.headers.items() if k.lower() in ("accept", "authorization")}
            request = urllib.request.Request(f"http://{registry}{self.path}", headers=headers, method=self.command)
            try:
                with urllib.request.urlopen(request, timeout=10) as answer:
                    status, reply, body = answer.status, answer.headers, answer.read()
            except urllib.error.HTTPError as error:
                status, reply, body = error.code, error.headers, error.read()
            self.send_response(status)
            for name in ("Content-Type", "Docker-Content-Digest", "WWW-Authenticate"):
                if reply.get(name):
                    self.send_header(name, reply[name])
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        do_GET = do_HEAD = _forward

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True).start()
    try:
        yield f"127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def run_once(images: list[str], threads: int, config_dir: Path) -> float:
    from concurrent.futures import ThreadPoolExecutor

    lookup = RegistryClient(Credentials(config_dir, helper_path="", google_token=lambda: None).for_registry).lookup
    start = time.perf_counter()
    with ThreadPoolExecutor(max_workers=threads) as pool:
        rows = list(pool.map(lambda image: check_image(image, ("bench",), lookup), images))
    elapsed = time.perf_counter() - start
    bad = [row for row in rows if row.status is not Status.OK]
    if bad:
        sys.exit(f"not every image was found: {bad[0].where}: {bad[0].message}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--registry", default="127.0.0.1:5000")
    parser.add_argument("--count", type=int, default=4)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--delay-ms", type=float, default=0.0, help="added before every answer of the registry")
    parser.add_argument("--image", action="append", default=[], help="an image reference to check (repeatable)")
    args = parser.parse_args()
    images = args.image or discover(args.registry, args.count)
    if args.delay_ms > 0:
        with delaying_proxy(args.registry, args.delay_ms / 1000) as proxy:
            measure([image.replace(args.registry, proxy, 1) for image in images], args.runs)
    else:
        measure(images, args.runs)


def measure(images: list[str], runs: int) -> None:
    with tempfile.TemporaryDirectory() as config_dir:  # an empty docker config: anonymous, as a fresh machine
        run_once(images, len(images), Path(config_dir))  # warm-up: imports, first connections
        results = {}
        for mode, threads in (("concurrent", len(images)), ("sequential", 1)):
            times = [run_once(images, threads, Path(config_dir)) for _ in range(runs)]
            results[mode] = statistics.median(times)
            print(
                f"{mode:<11} {len(images)} images: median {results[mode] * 1000:7.1f} ms "
                f"(min {min(times) * 1000:.1f}, max {max(times) * 1000:.1f}) over {runs} runs"
            )
    print(f"sequential / concurrent: {results['sequential'] / results['concurrent']:.2f}x")


if __name__ == "__main__":
    main()
