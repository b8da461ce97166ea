#!/usr/bin/env bash
# The cluster tests (API seam, kubeconfig, credential plugins, connect, submit), the GCS preflight against the emulator
# and the runtime's absl use in a second virtual environment that holds the lowest version pyproject.toml declares
# for each direct dependency (tests/lowest-versions.txt): a floor that is too low fails here, not at a user's first
# submit. Needs Python >= 3.11 and PyPI (a few minutes the first time; the environment is reused after that).
# Usage: bash scripts/test-lowest.sh [pytest args...]   ($PWDEPLOY_LOWEST_VENV names the environment: .venv-lowest)
set -euo pipefail
cd "$(dirname "$0")/.."

venv=${PWDEPLOY_LOWEST_VENV:-.venv-lowest}
constraints=tests/lowest-versions.txt
if [ ! -x "$venv/bin/python" ]; then
  echo "== creating $venv (the lowest declared versions)"
  python3 -m venv "$venv"
fi
echo "== installing pwdeploy with the versions of $constraints into $venv"
# pwdeploy with its dependencies, and the tools the cluster tests use (cryptography: the stubs' throwaway CA)
"$venv/bin/python" -m pip install -q --disable-pip-version-check -c "$constraints" -e . \
  pytest pytest-timeout jsonschema referencing cryptography

# A pin the resolver could not honour would test something else: every pinned package must be at its pin.
"$venv/bin/python" - "$constraints" <<'PY'
import re
import sys
from importlib.metadata import PackageNotFoundError, version

wrong = []
for line in open(sys.argv[1], encoding="utf-8"):
    line = line.split("#")[0].strip()
    if not line:
        continue
    name, pinned = re.split(r"==", line)
    try:
        found = version(name.strip())
    except PackageNotFoundError:
        found = "not installed"
    if found != pinned.strip():
        wrong.append(f"{name.strip()}: {found}, not {pinned.strip()}")
if wrong:
    sys.exit("scripts/test-lowest.sh: not at the declared floor: " + "; ".join(wrong))
print(f"== every one of the pinned floors is installed ({sys.argv[1]})")
PY

tests=(
  tests/test_cluster_api.py
  tests/test_cluster_answers_stub.py
  tests/test_cluster_submit.py
  tests/test_cluster_lifecycle.py
  tests/test_connect.py
  tests/test_connect_tls.py
  tests/test_kubeconfig.py
  tests/test_credential_plugins.py
  tests/test_kube_proxies.py
  tests/test_preflight_emulator.py
  tests/test_runtime.py::test_prepare_data_workers_marks_absl_flags_parsed
)
echo "== cluster tests with the lowest versions"
"$venv/bin/python" -m pytest -q -p no:cacheprovider "${tests[@]}" "$@"
