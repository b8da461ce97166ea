"""GCS preflight: what pwdeploy asks a bucket (facts), what it concludes (evaluate) and how it says so (report).

``pwdeploy.preflight.run_preflight`` is the entry point; nothing here imports google.cloud.storage at import time.
"""
