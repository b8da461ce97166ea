"""Manifest validation, in parts: schemas (JobSet envelope, Kubernetes OpenAPI), JobSet webhook rules, Job and
pod rules of the API server, and reading manifest files. The entry points are in pwdeploy.validation.validate."""
