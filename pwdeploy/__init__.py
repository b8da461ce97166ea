"""pwdeploy: take JAX jobs to Pathways on GKE, checked before a TPU is paid for."""

__version__ = "0.2.0"
