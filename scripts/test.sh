#!/usr/bin/env bash
# Install everything the tests need on a fresh Debian machine, start the services, lint, and run the tests.
# Usage: bash scripts/test.sh [pytest args...]
set -euo pipefail
cd "$(dirname "$0")/.."

apt_packages=(docker.io docker-registry busybox-static)
missing=()
for pkg in "${apt_packages[@]}"; do
  dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
done
if [ "${#missing[@]}" -gt 0 ]; then
  echo "== installing ${missing[*]}"
  sudo_cmd=""
  [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

echo "== installing pwdeploy and its test dependencies"
python3 -m pip install -q --disable-pip-version-check -e ".[dev]"

echo "== lint: ruff and mypy (strict)"
ruff check pwdeploy tests benchmarks examples
ruff format --check pwdeploy tests benchmarks examples
mypy

echo "== starting the Docker engine and the local registry"
eval "$(bash scripts/docker-services.sh start)"
trap 'bash scripts/docker-services.sh stop >/dev/null 2>&1 || true' EXIT

echo "== tests"
python3 -m pytest "$@"
