#!/usr/bin/env bash
# Start or stop a private Docker engine and a local OCI registry for the sidecar build tests and CI.
#
#   scripts/docker-services.sh start [STATE_DIR]   # prints: export DOCKER_HOST=unix://STATE_DIR/docker.sock
#   scripts/docker-services.sh stop  [STATE_DIR]
#   scripts/docker-services.sh status [STATE_DIR]
#
# dockerd gets its own socket, data root and exec root under STATE_DIR (default $PWDEPLOY_DOCKER_STATE or
# /tmp/pwdeploy-docker), the overlay2 storage driver, and no iptables or bridge (the machines this runs on allow
# neither). The registry (Debian's docker-registry, distribution 2.8) listens on 127.0.0.1:5000, which docker
# treats as an insecure registry by default. Both commands are idempotent. Needs root, docker.io, docker-registry.
set -euo pipefail

action=${1:-}
state=${2:-${PWDEPLOY_DOCKER_STATE:-/tmp/pwdeploy-docker}}
registry_addr=${PWDEPLOY_REGISTRY_ADDR:-127.0.0.1:5000}
sock="$state/docker.sock"

say() { echo "docker-services: $*" >&2; }

alive() {  # alive PIDFILE
    [[ -f $1 ]] && kill -0 "$(cat "$1")" 2>/dev/null
}

wait_for() {  # wait_for SECONDS DESCRIPTION COMMAND...
    local deadline=$((SECONDS + $1)) what=$2
    shift 2
    until "$@" >/dev/null 2>&1; do
        if ((SECONDS >= deadline)); then
            say "$what did not come up; log tail:"
            return 1
        fi
        sleep 0.2
    done
}

engine_up() { DOCKER_HOST="unix://$sock" docker version --format '{{.Server.Version}}'; }
registry_up() {
    python3 -c "import urllib.request; urllib.request.urlopen('http://$registry_addr/v2/', timeout=1)" >/dev/null 2>&1
}

start_engine() {
    if alive "$state/dockerd.pid" && engine_up >/dev/null 2>&1; then
        say "dockerd already running (pid $(cat "$state/dockerd.pid"))"
        return
    fi
    command -v dockerd >/dev/null || { say "dockerd not found; apt-get install -y docker.io"; exit 1; }
    mkdir -p "$state/data" "$state/exec"
    rm -f "$sock"
    setsid dockerd --storage-driver=overlay2 --iptables=false --ip-masq=false --bridge=none \
        --data-root "$state/data" --exec-root "$state/exec" --pidfile "$state/dockerd.pid" \
        -H "unix://$sock" >"$state/dockerd.log" 2>&1 </dev/null &
    if ! wait_for 60 dockerd engine_up; then
        tail -n 20 "$state/dockerd.log" >&2
        exit 1
    fi
    say "dockerd $(engine_up) on unix://$sock"
}

start_registry() {
    if alive "$state/registry.pid" && registry_up; then
        say "registry already running on $registry_addr"
        return
    fi
    if registry_up; then
        say "something else already serves a registry on $registry_addr; using it"
        return
    fi
    command -v docker-registry >/dev/null || { say "docker-registry not found; apt-get install -y docker-registry"; exit 1; }
    mkdir -p "$state/registry"
    cat >"$state/registry.yml" <<YAML
version: 0.1
log: {level: warn}
storage:
  filesystem: {rootdirectory: $state/registry}
  delete: {enabled: true}
http:
  addr: $registry_addr
YAML
    setsid docker-registry serve "$state/registry.yml" >"$state/registry.log" 2>&1 </dev/null &
    echo $! >"$state/registry.pid"
    if ! wait_for 30 registry registry_up; then
        tail -n 20 "$state/registry.log" >&2
        exit 1
    fi
    say "registry on $registry_addr"
}

stop_pid() {  # stop_pid PIDFILE NAME
    if alive "$1"; then
        local pid
        pid=$(cat "$1")
        kill "$pid"
        for _ in $(seq 1 100); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.1
        done
        kill -0 "$pid" 2>/dev/null && kill -9 "$pid"
        say "stopped $2 (pid $pid)"
    fi
    rm -f "$1"
}

case $action in
    start)
        mkdir -p "$state"
        start_engine
        start_registry
        echo "export DOCKER_HOST=unix://$sock"
        ;;
    stop)
        stop_pid "$state/registry.pid" registry
        stop_pid "$state/dockerd.pid" dockerd
        ;;
    status)
        if alive "$state/dockerd.pid" && engine_up >/dev/null 2>&1; then say "dockerd up"; else say "dockerd down"; fi
        if registry_up; then say "registry up on $registry_addr"; else say "registry down"; fi
        ;;
    *)
        echo "usage: $0 start|stop|status [STATE_DIR]" >&2
        exit 2
        ;;
esac
