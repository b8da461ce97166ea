"""The job config, in one package: what a job config may say and how it becomes one typed, immutable JobConfig.

- ``fields``: the field table (path, value kind, default, help, flag); the typed model is checked against it
  when ``load`` is imported (``agreement``): a field in one and not the other fails, naming it.
- ``model``: the typed, immutable JobConfig and its sections.
- ``value_kinds``: how each kind of value (integer, quantity, GCS URI, KEY=VALUE, ...) is parsed from text.
- ``values``: parsers and checks shared by the kinds and by other packages (GCS paths, names, image pins).
- ``checks``: the cross-field checks, run once the fields they read have parsed.
- ``load``: reading the file, merging flags and the environment, building the JobConfig.
- ``json_schema``: the JSON Schema of the config file, for editors and the reference table of docs/config.md.
"""

from __future__ import annotations

from pwdeploy.config.load import installed_jax_version, installed_version, load_job, merge
from pwdeploy.config.model import JobConfig, SecretRef
from pwdeploy.config.values import GcsPath, check_image_pinned, parse_gcs

__all__ = [
    "GcsPath",
    "JobConfig",
    "SecretRef",
    "check_image_pinned",
    "installed_jax_version",
    "installed_version",
    "load_job",
    "merge",
    "parse_gcs",
]
