"""A trainer that takes its output folder as an argument (``base_output_directory=gs://...``, as MaxText does) and
writes there through each client a JAX program writes GCS with: google-cloud-storage (a metrics file), gcsfs
through etils.epath (a config copy), and Orbax (a checkpoint: its directories through epath, its arrays through
tensorstore), then restores the checkpoint. Prints one JSON line: what it wrote and whether the restore matched."""

from __future__ import annotations

import json
import sys

import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp
from etils import epath
from google.cloud import storage

from pwdeploy import runtime


def output_directory(argv: list[str]) -> str:
    return next(arg.split("=", 1)[1] for arg in argv if arg.startswith("base_output_directory="))


def main() -> None:
    runtime.initialize()  # pathwaysutils.initialize() on Pathways
    out = output_directory(sys.argv[1:])
    bucket, _, prefix = out.removeprefix("gs://").partition("/")
    storage.Client().bucket(bucket).blob(f"{prefix}/metrics.txt").upload_from_string(b"loss 1.0\n")
    (epath.Path(out) / "config.txt").write_text("steps=1\n")
    tree = {"w": jnp.arange(8.0).reshape(2, 4)}
    with ocp.CheckpointManager(f"{out}/checkpoints") as manager:
        manager.save(1, args=ocp.args.StandardSave(tree))
        manager.wait_until_finished()
        restored = manager.restore(1, args=ocp.args.StandardRestore(tree))
    same = bool(np.array_equal(np.asarray(restored["w"]), np.asarray(tree["w"])))
    print(json.dumps({"wrote": out, "restored": same}))


if __name__ == "__main__":
    main()
