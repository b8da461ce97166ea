"""pwdeploy: take JAX jobs to Pathways on GKE, checked before a TPU is paid for.

The library's functions are in ``pwdeploy.api`` (``from pwdeploy import api``; docs/api.md), a submodule this
package does not import, so ``import pwdeploy`` stays as cheap as the commands need."""

__version__ = "0.2.0"
