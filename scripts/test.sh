#!/usr/bin/env bash
# Install everything the tests need on a fresh Debian or Ubuntu machine, start the services, lint, and run the tests.
# Usage: bash scripts/test.sh [pytest args...]
#
# Needs root, or sudo: apt-get installs the missing system packages, and the private Docker engine runs as root.
# Python packages go into the virtual environment .venv (created if missing, reused otherwise; $PWDEPLOY_VENV
# names another), because Debian's and Ubuntu's own Python refuses pip installs (PEP 668). Needs Python >= 3.11.
set -euo pipefail
cd "$(dirname "$0")/.."

venv=${PWDEPLOY_VENV:-.venv}
sudo_cmd=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "scripts/test.sh: needs root or sudo (apt-get, Docker engine)" >&2; exit 1; }
  sudo_cmd="sudo"
fi
echo "== scripts/test.sh needs root${sudo_cmd:+ (through sudo)} for apt-get and for the private Docker engine"

python3 -c 'import sys; sys.exit(sys.version_info < (3, 11))' ||
  { echo "scripts/test.sh: needs Python >= 3.11; python3 is $(python3 --version 2>&1)" >&2; exit 1; }

apt_packages=(docker.io docker-registry busybox-static)
missing=()
for pkg in "${apt_packages[@]}"; do
  dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
done
# Debian's python3 creates virtual environments only with python3-venv installed (it brings ensurepip).
[ -x "$venv/bin/python" ] || python3 -c 'import ensurepip' 2>/dev/null || missing+=(python3-venv)
if [ "${#missing[@]}" -gt 0 ]; then
  echo "== installing ${missing[*]}"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

if [ ! -x "$venv/bin/python" ]; then
  echo "== creating the virtual environment $venv"
  python3 -m venv "$venv"
fi
# shellcheck disable=SC1091  # created above
. "$venv/bin/activate"

echo "== installing pwdeploy and its test dependencies into $venv"
python -m pip install -q --disable-pip-version-check -e ".[dev]"

echo "== lint: ruff and mypy (strict)"
ruff check pwdeploy tests benchmarks examples
ruff format --check pwdeploy tests benchmarks examples
mypy

# The control_plane tier (tests/control_plane) runs on etcd, kube-apiserver, the controller manager, the scheduler,
# JobSet, Kueue and KWOK built from their Go modules: instant from the cache, long the first time on a machine.
if command -v go >/dev/null; then
  echo "== building the control plane (scripts/control-plane.sh build; cached after the first build)"
  bash scripts/control-plane.sh build >/dev/null  # a failed build stops here (set -e)
elif [ "${CI:-}" = true ]; then
  echo "scripts/test.sh: Go is not installed; CI runs the control_plane tier, which needs Go >= 1.26 (https://go.dev/doc/install)" >&2
  exit 1
else
  echo "== no Go: the control_plane tier will be skipped (Go >= 1.26: https://go.dev/doc/install)"
fi

echo "== starting the Docker engine and the local registry"
services=$($sudo_cmd bash scripts/docker-services.sh start)  # a failed start stops here (set -e)
eval "$services"
if [ -n "$sudo_cmd" ]; then  # the engine runs as root; its private socket is handed to the user running the tests
  $sudo_cmd chown "$(id -u):$(id -g)" "${DOCKER_HOST#unix://}"
fi
trap '$sudo_cmd bash scripts/docker-services.sh stop >/dev/null 2>&1 || true' EXIT

echo "== tests"
python -m pytest "$@"

# The declared dependency floors are the tested ones: the cluster tests again, in a second environment that holds
# the lowest version pyproject.toml allows of each direct dependency (tests/lowest-versions.txt).
if [ "${PWDEPLOY_SKIP_LOWEST:-}" != 1 ]; then
  bash scripts/test-lowest.sh
fi
