"""Where a cluster flow's lines go and what it takes from where it runs (``Surroundings``): the CLI writes the lines
on its streams, ``pwdeploy.api`` keeps them quiet, tests collect them. Used by submit's flow (``deploy``) and by the
connect session (``pwdeploy.session.attach``)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pwdeploy.cluster.wait import Display

Say = Callable[[str], None]
# Runs COMMAND with the session's variables on top of the caller's environment; its exit status.
RunCommand = Callable[[tuple[str, ...], Mapping[str, str]], int]


def _nowhere(_line: str) -> None:
    pass


@dataclass(frozen=True)
class Surroundings:
    """Where a cluster flow's lines go and what it takes from where it runs: ``say`` hears the lines for the user
    (stderr), ``show`` the lines that are the command's output (stdout), ``display`` makes the line that shows a
    wait's progress; ``installed_jax`` is the local jax version (None: not installed), ``run_command`` runs a
    session's COMMAND (None: this caller runs none)."""

    say: Say = _nowhere
    show: Say = _nowhere
    display: Callable[[], Display] | None = None
    installed_jax: Callable[[], str | None] | None = None
    run_command: RunCommand | None = None

    def new_display(self) -> Display:
        if self.display is not None:
            return self.display()
        import io

        from pwdeploy.cluster.wait import Display

        return Display(io.StringIO(), tty=False)
