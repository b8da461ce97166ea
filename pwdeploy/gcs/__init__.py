"""GCS for preflight and local runs: the client seam (client), what pwdeploy asks a bucket (facts) and what it
concludes (evaluate, as rows of ``pwdeploy.report``).

``pwdeploy.preflight.run_preflight`` is the entry point; nothing here imports google.cloud.storage at import time.
"""
