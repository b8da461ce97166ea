"""The table of pwdeploy's commands: where each lives, its one-line help and its example. One row per command
(and per subcommand that has an example of its own); `pwdeploy --help` reads it without importing any command."""

from __future__ import annotations

from typing import NamedTuple


class Entry(NamedTuple):
    example: str
    target: str = ""  # "module:attribute" of a top-level command; empty for a subcommand's row
    summary: str = ""  # the line under `pwdeploy --help`'s Commands


_JOB = "-f job.yaml"
# The parameter names of the job flags start with this (cli.options); help lays out a command with none of them
# without importing the config.
JOB_PARAM_PREFIX = "job__"

TABLE: dict[str, Entry] = {
    "": Entry("pwdeploy render -f job.yaml | kubectl apply -f -"),
    "render": Entry(
        f"pwdeploy render {_JOB} --num-slices 2 --output-dir out/",
        "pwdeploy.cli.render:render",
        "Render the Kubernetes manifests of a job.",
    ),
    "validate": Entry(
        "pwdeploy validate out/*.yaml --kubernetes-version 1.30",
        "pwdeploy.cli.validation:validate",
        "Check manifests against the Kubernetes and JobSet schemas.",
    ),
    "schema": Entry(
        "pwdeploy schema > pwdeploy.schema.json",
        "pwdeploy.cli.render:schema",
        "Print the JSON Schema of the job config.",
    ),
    "check": Entry(
        f"pwdeploy check {_JOB} -o json",
        "pwdeploy.cli.check:check",
        "Read the job's Python program for what fails or is slow on Pathways.",
    ),
    "local": Entry(
        f"pwdeploy local run {_JOB}", "pwdeploy.cli.local:local", "Run a job locally on emulated CPU devices."
    ),
    "local run": Entry(f"pwdeploy local run {_JOB} -- python3 train.py --steps 10"),
    "local env": Entry(f"pwdeploy local env {_JOB} -- python3 -c 'import jax; print(jax.devices())'"),
    "sidecar": Entry(
        f"pwdeploy sidecar build {_JOB} --push",
        "pwdeploy.cli.sidecar:sidecar",
        "Build and push the colocated-Python sidecar image.",
    ),
    "sidecar dockerfile": Entry(f"pwdeploy sidecar dockerfile {_JOB} | less"),
    "sidecar build": Entry(f"pwdeploy sidecar build {_JOB} --push"),
    "image": Entry(
        f"pwdeploy image build {_JOB}",
        "pwdeploy.cli.image:image",
        "Build and push the job's own (main) container image.",
    ),
    "image dockerfile": Entry(f"pwdeploy image dockerfile {_JOB} | less"),
    "image build": Entry(f"pwdeploy image build {_JOB} --image-repository us-docker.pkg.dev/p/r/train"),
    "preflight": Entry(
        f"pwdeploy preflight {_JOB} --region us-central1",
        "pwdeploy.cli.preflight:preflight",
        "Check the job's GCS locations, images and (--cluster) the cluster.",
    ),
    "submit": Entry(
        f"pwdeploy submit {_JOB} --wait", "pwdeploy.cli.submission:submit", "Submit a job to a GKE cluster."
    ),
    "list": Entry("pwdeploy list -n team-a", "pwdeploy.cli.cluster:list_jobs", "List pwdeploy-managed JobSets."),
    "status": Entry(
        "pwdeploy status demo -n team-a", "pwdeploy.cli.cluster:status", "Show a job's state, pods and events."
    ),
    "diagnose": Entry(
        "pwdeploy diagnose demo -n team-a -o json",
        "pwdeploy.cli.diagnose:diagnose",
        "Explain why a job is not running, with the fix.",
    ),
    "logs": Entry(
        "pwdeploy logs demo -f --component worker --slice 1",
        "pwdeploy.cli.cluster:logs",
        "Print a job's container logs.",
    ),
    "connect": Entry(
        "pwdeploy connect demo -- python3 explore.py",
        "pwdeploy.cli.connect:connect",
        "Forward a headless job's proxy to 127.0.0.1 and run JAX against it.",
    ),
    "profile": Entry(
        "pwdeploy profile demo --duration 10",
        "pwdeploy.cli.profile:profile",
        "Trace a running job's program into its storage.profiles.",
    ),
    "drill": Entry(
        "pwdeploy drill demo --lose-slice 1 --after-step 100",
        "pwdeploy.cli.drill:drill",
        "Inject one real fault into a running job and report its recovery.",
    ),
    "delete": Entry("pwdeploy delete demo -n team-a --yes", "pwdeploy.cli.cluster:delete", "Delete a job."),
}

# The top-level commands, in the order `pwdeploy --help` lists them.
COMMANDS = {name: entry for name, entry in TABLE.items() if entry.target}
