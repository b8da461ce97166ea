"""`pwdeploy check` (``api.check``): will the job's program work on Pathways, and where will it be slow? Also the
--no-check flag of `local run` and `preflight`, which run the check first."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from pwdeploy.cli.options import FILE_PARAM, JobCommand, job_from_params, job_options, overrides_from, pop_job_params
from pwdeploy.cli.output import emit, output_option
from pwdeploy.errors import CheckError
from pwdeploy.text import printable

if TYPE_CHECKING:
    pass

NO_CHECK = click.option("--no-check", is_flag=True, help="Do not run `pwdeploy check` over the job's program first.")


@click.command("check", cls=JobCommand)
@job_options
@output_option
@click.argument("paths", nargs=-1, type=click.Path(path_type=Path), metavar="[PATH]...")
def check(paths: tuple[Path, ...], output: str, **params: Any) -> None:
    """Read the job's Python program (never importing or running it) for what fails or is slow on Pathways.

    Reads the entry module of main.command and the modules it imports from the job's folder; PATHs (files or
    folders) add more, or are all that is read without -f. A job config is given with -f, never as a PATH;
    notebooks, requirements files, modules over 2 MiB and links out of a folder are not read, and a note says so.
    Each finding names its rule, what it saw and why, the fix and the public source it rests on. A
    `# pwdeploy: ignore[RULE]` comment on the line silences one.

    Exit code 0 without an error finding (warnings and info do not fail), 11 with one.
    """
    job_params = pop_job_params(params)
    overrides, _ = overrides_from(job_params)
    file = job_params.get(FILE_PARAM)
    job = job_from_params(job_params, pin_images=False) if file is not None or overrides else None
    from pwdeploy import api

    report = api.check(job, paths, config_file=file)
    if output != "text":
        emit(report.as_json(), output)
    else:
        for line in report.lines():
            click.echo(printable(line))  # findings quote the program's own text: a planted escape stays inert
    if report.errors:
        rules = ", ".join(dict.fromkeys(f.id for f in report.errors))
        raise CheckError(f"{len(report.errors)} error finding(s): {rules}")
