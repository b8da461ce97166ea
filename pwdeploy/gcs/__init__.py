"""GCS for preflight and local runs: the client seam (storage_client), what pwdeploy asks a bucket (facts,
lifecycle_rules, iam). What preflight concludes from those facts is ``pwdeploy.preflight.gcs_evaluate``.

Nothing here imports google.cloud.storage at import time.
"""
