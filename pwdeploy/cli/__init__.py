"""The `pwdeploy` command. Subcommands load lazily so `pwdeploy --help` stays fast.

This is the one place where errors become messages and exit codes.
"""

from __future__ import annotations

import gc
import importlib
import sys
from typing import Any, NoReturn

import click

from pwdeploy import __version__
from pwdeploy.cli.commands import COMMANDS, TABLE
from pwdeploy.errors import ConfigErrors, PwdeployError


class LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        entry = COMMANDS.get(cmd_name)
        if entry is None:
            return None
        module_name, attr = entry.target.split(":")
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name != module_name:
                raise
            return None  # a command whose module is not part of this build
        command: click.Command = getattr(module, attr)
        from pwdeploy.cli.help import apply  # the help layout and example, applied in one place

        return apply(command, cmd_name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        # Short help from the table, so `--help` imports no command module.
        with formatter.section("Commands"):
            formatter.write_dl([(name, entry.summary) for name, entry in COMMANDS.items()])


class PwdeployGroup(LazyGroup):
    """Runs the command and turns every error into a message and an exit code, in this one place."""

    debug = False  # the parsed --debug of the current run: a --debug after `--` belongs to the user's program

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        found = super().resolve_command(ctx, args)
        _start_collecting()  # the command's module is imported: what start-up made lives until the process ends
        return found

    def invoke(self, ctx: click.Context) -> Any:
        PwdeployGroup.debug = bool(ctx.params.get("debug"))
        return super().invoke(ctx)

    def main(  # type: ignore[override]
        self,
        args: list[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        argv = list(sys.argv[1:] if args is None else args)
        PwdeployGroup.debug = False
        if not standalone_mode:  # embedded (click's contract): errors are raised, the command's value returned
            return super().main(argv, prog_name or "pwdeploy", complete_var, standalone_mode=False, **extra)
        try:
            result = super().main(argv, prog_name or "pwdeploy", complete_var, standalone_mode=False, **extra)
        except click.exceptions.Abort:
            click.echo("Aborted.", err=True)
            sys.exit(130)
        except click.NoSuchOption as exc:
            _no_such_option(exc, argv)
        except click.ClickException as exc:
            exc.show()
            sys.exit(exc.exit_code)
        except PwdeployError as exc:
            _pwdeploy_error(exc, debug=self.debug)
        except KeyboardInterrupt:
            click.echo("Interrupted.", err=True)
            sys.exit(130)
        except Exception as exc:  # last resort: no traceback for users unless asked
            if self.debug:
                raise
            from pwdeploy.text import printable

            said = printable(f"internal error: {type(exc).__name__}: {exc}")
            click.echo(f"{said}\n  rerun with --debug for the traceback", err=True)
            sys.exit(1)
        sys.exit(result if isinstance(result, int) else 0)


def _no_such_option(exc: click.NoSuchOption, argv: list[str]) -> NoReturn:
    if exc.option_name != "--debug":
        exc.show()
        sys.exit(exc.exit_code)
    click.echo(f"error: --debug is pwdeploy's own option and goes before the command: {_debug_first(argv)}", err=True)
    sys.exit(exc.exit_code)


def _pwdeploy_error(exc: PwdeployError, *, debug: bool) -> NoReturn:
    """Each error on a line of its own (an API argument's named by its flag), printable; the traceback too with
    --debug."""
    if debug:
        import traceback  # only with --debug: 2 ms of every command's start-up otherwise

        traceback.print_exc()
    from pwdeploy.cli.argument_flags import as_said  # an API argument's error names its flag
    from pwdeploy.text import printable  # an error may quote a server's or a stream's text

    for error in exc.errors if isinstance(exc, ConfigErrors) else [exc]:
        click.echo(printable(f"error: {as_said(error)}"), err=True)
    sys.exit(exc.exit_code)


def _debug_first(argv: list[str]) -> str:
    """The command line with ``--debug`` moved to where it belongs (only the first ``--debug``; ``--`` and what
    follows it stay as they are)."""
    import shlex

    end = argv.index("--") if "--" in argv else len(argv)
    own = [arg for arg in argv[:end] if arg != "--debug"]
    return shlex.join(["pwdeploy", "--debug", *own, *argv[end:]])


@click.group(
    cls=PwdeployGroup,
    context_settings={"help_option_names": ["-h", "--help"]},
    epilog=f"\b\nExample:\n  {TABLE[''].example}\n"
    'Shell completion (bash): eval "$(_PWDEPLOY_COMPLETE=bash_source pwdeploy)"',
)
@click.option("--debug", is_flag=True, help="Show tracebacks for errors.")
@click.version_option(__version__, prog_name="pwdeploy")
def cli(debug: bool) -> None:
    """pwdeploy: render, check, run locally and submit JAX jobs for Pathways on GKE."""
    del debug  # PwdeployGroup.invoke reads it before the command runs; the context object stays the caller's Seams


_held_collection = False


def _start_collecting() -> None:
    """Turns the cycle collector back on after start-up (see main), with start-up's objects left out of it."""
    global _held_collection
    if _held_collection:
        _held_collection = False
        gc.freeze()
        gc.enable()


def main(argv: list[str] | None = None) -> None:
    """The console script. The cycle collector is off while the command's modules are imported: their classes,
    functions and tables live until the process ends, and collections walking them again and again cost `render`
    2 ms; they are then frozen (never walked again) and the collector runs as usual for the command itself."""
    global _held_collection
    if gc.isenabled():
        gc.disable()
        _held_collection = True
    try:
        cli.main(argv)
    finally:
        _start_collecting()
