"""The transfer probe `local run` puts first on the job's PYTHONPATH: its ``sitecustomize`` counts, inside the
job's own process, the bytes JAX moves between host and device and the host syncs, per training step."""
