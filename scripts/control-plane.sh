#!/usr/bin/env bash
# Build the components of the end-to-end tests' Kubernetes control plane from their Go modules, at the versions of
# scripts/control-plane/versions.env, into a cache outside the clone keyed by those versions:
#
#   scripts/control-plane.sh build   # builds what the cache lacks; prints the binaries' folder last
#   scripts/control-plane.sh dir     # the binaries' folder (exit 1 when some are not built yet)
#   scripts/control-plane.sh start   # build if needed, start a control plane in the background (tests/control_plane)
#   scripts/control-plane.sh env     # its KUBECONFIG line, to eval
#   scripts/control-plane.sh stop    # stop it
#
# Components: etcd, kube-apiserver, kube-controller-manager, kube-scheduler (k8s.io/kubernetes), the JobSet
# controller manager (sigs.k8s.io/jobset, two versions), Kueue (sigs.k8s.io/kueue) and KWOK (sigs.k8s.io/kwok).
# Each is built in a small wrapper module whose go.mod requires the component at its pinned version (for
# k8s.io/kubernetes also its k8s.io/* staging modules at the matching v0.x.y, which its own go.mod replaces with
# local paths). A cold build on 2 cores takes long; the Go build cache ($GOCACHE) and module cache are reused.
# Needs Go (1.26) and the Go module proxy. The cache is $PWDEPLOY_CONTROL_PLANE_CACHE or
# ~/.cache/pwdeploy/control-plane.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck disable=SC1091
. "$here/control-plane/versions.env"

cache=${PWDEPLOY_CONTROL_PLANE_CACHE:-$HOME/.cache/pwdeploy/control-plane}
key="k8s-${KUBERNETES_VERSION}_etcd-${ETCD_VERSION}_jobset-${JOBSET_VERSION}-${JOBSET_NEWEST_VERSION}_kueue-${KUEUE_VERSION}_kwok-${KWOK_VERSION}"
bin="$cache/$key/bin"
components=(etcd kube-apiserver kube-controller-manager kube-scheduler "jobset-$JOBSET_VERSION"
    "jobset-$JOBSET_NEWEST_VERSION" "kueue-$KUEUE_VERSION" kwok)
export GOFLAGS=-mod=mod GOTOOLCHAIN=local

say() { echo "control-plane: $*" >&2; }

all_built() {
    local c
    for c in "${components[@]}"; do [[ -x $bin/$c ]] || return 1; done
    stamped kube-apiserver
}

wrapper() {  # wrapper NAME MODULE@VERSION [REQUIRE...]: a fresh wrapper module's folder on stdout
    local dir="$cache/$key/src/$1"
    rm -rf "$dir" && mkdir -p "$dir"
    printf 'module pwdeploy.test/controlplane/%s\n\ngo 1.26\n' "$1" >"$dir/go.mod"
    echo "$dir"
}

build_main() {  # build_main NAME DIR PACKAGE [LDFLAGS]: go build PACKAGE in DIR into $bin/NAME
    local name=$1 dir=$2 pkg=$3 ldflags="-s ${4:-}" start=$SECONDS
    say "building $name ($pkg) ..."
    (cd "$dir" && go build -trimpath -ldflags="$ldflags" -o "$bin/$name.tmp" "$pkg")
    mv "$bin/$name.tmp" "$bin/$name"
    say "built $name in $((SECONDS - start)) s"
}

build_kubernetes() {
    local dir mod staging minor=${KUBERNETES_VERSION#v1.}
    dir=$(wrapper kubernetes)
    mod=$(cd "$dir" && go mod download -json "k8s.io/kubernetes@$KUBERNETES_VERSION" |
        python3 -c 'import json, sys; print(json.load(sys.stdin)["GoMod"])')
    staging=$(sed -n 's#^[[:space:]]*\(k8s\.io/[a-z0-9-]*\) => \./staging/.*#\1#p' "$mod")
    {
        echo "require k8s.io/kubernetes $KUBERNETES_VERSION"
        for m in $staging; do echo "replace $m => $m v0.$minor"; done
    } >>"$dir/go.mod"
    for c in kube-apiserver kube-controller-manager kube-scheduler; do
        mkdir -p "$dir/$c"
        case $c in
            kube-apiserver) app=k8s.io/kubernetes/cmd/kube-apiserver/app; new=NewAPIServerCommand ;;
            kube-controller-manager) app=k8s.io/kubernetes/cmd/kube-controller-manager/app; new=NewControllerManagerCommand ;;
            kube-scheduler) app=k8s.io/kubernetes/cmd/kube-scheduler/app; new=NewSchedulerCommand ;;
        esac
        cat >"$dir/$c/main.go" <<GO
package main

import (
	"os"

	"k8s.io/component-base/cli"
	"$app"
)

func main() { os.Exit(cli.Run(app.$new())) }
GO
    done
    say "resolving k8s.io/kubernetes $KUBERNETES_VERSION's modules (go mod tidy)"
    (cd "$dir" && go mod tidy)
    for c in kube-apiserver kube-controller-manager kube-scheduler; do
        stamped "$c" || build_main "$c" "$dir" "./$c" "$(version_ldflags)"
    done
}

# The version the binaries report (/version, --version), as Kubernetes' own build stamps it
# (kubernetes hack/lib/version.sh: kube::version::ldflags); unstamped they say v0.0.0-master.
version_ldflags() {
    local minor=${KUBERNETES_VERSION#v1.} pkg flags=""
    minor=${minor%%.*}
    for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
        flags+=" -X $pkg.gitVersion=$KUBERNETES_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
        flags+=" -X $pkg.gitTreeState=clean"
    done
    echo "$flags"
}

stamped() {  # stamped NAME: the Kubernetes binary is built and reports the pinned version
    [[ -x $bin/$1 ]] && "$bin/$1" --version 2>/dev/null | grep -qx "Kubernetes $KUBERNETES_VERSION"
}

build_etcd() {
    local dir
    dir=$(wrapper etcd)
    mkdir -p "$dir/etcd"
    cat >"$dir/etcd/main.go" <<'GO'
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
GO
    echo "require go.etcd.io/etcd/server/v3 $ETCD_VERSION" >>"$dir/go.mod"
    (cd "$dir" && go mod tidy)
    build_main etcd "$dir" ./etcd
}

build_module_main() {  # build_module_main NAME MODULE VERSION PACKAGE
    local dir
    dir=$(wrapper "$1")
    echo "require $2 $3" >>"$dir/go.mod"
    mkdir -p "$dir/tools"
    printf '//go:build tools\n\npackage tools\n\nimport _ "%s"\n' "$4" >"$dir/tools/tools.go"
    (cd "$dir" && go mod tidy)
    build_main "$1" "$dir" "$4"
}

# The running plane's folder: its keys, tokens and kubeconfigs, and the env line `env` prints to be eval-ed. A
# predictable path under /tmp, so it is trusted only when private: this user's own folder (not a link), mode 700.
state=${PWDEPLOY_CONTROL_PLANE_STATE:-${TMPDIR:-/tmp}/pwdeploy-control-plane-$(id -u)}

private() {  # private FOLDER: exit 1 unless FOLDER is this user's own folder, not a link, that no one else may enter
    local found
    if [[ -L $1 || ! -d $1 ]]; then
        say "$1 is not a folder (a link, or a file): not the control plane's; remove it"; exit 1
    fi
    found=$(stat -c '%u %a' "$1")
    if [[ $found != "$(id -u) 700" ]]; then
        say "$1 is not private (owner uid and mode: $found; it must be $(id -u) 700): not trusted; remove it"
        exit 1
    fi
}

running() {  # running FOLDER: the pid in FOLDER/pid is this user's control plane run for FOLDER, and alive
    local pid cmdline
    pid=$(cat "$1/pid" 2>/dev/null) || return 1
    [[ $pid =~ ^[0-9]+$ && -r /proc/$pid/cmdline && $(stat -c %u "/proc/$pid") == "$(id -u)" ]] || return 1
    cmdline=$(tr '\0' ' ' <"/proc/$pid/cmdline")
    [[ $cmdline == *" -m tests.control_plane run $1 "* ]]
}

case ${1:-} in
    build)
        command -v go >/dev/null || { say "Go is not installed (https://go.dev/doc/install; Debian: golang-go >= 1.26)"; exit 1; }
        mkdir -p "$bin"
        if all_built; then say "cached: $bin"; echo "$bin"; exit 0; fi
        say "building into $bin (a cold build on 2 cores takes tens of minutes; later runs reuse it)"
        stamped kube-apiserver && stamped kube-controller-manager && stamped kube-scheduler || build_kubernetes
        [[ -x $bin/etcd ]] || build_etcd
        [[ -x $bin/jobset-$JOBSET_VERSION ]] || build_module_main "jobset-$JOBSET_VERSION" sigs.k8s.io/jobset "$JOBSET_VERSION" sigs.k8s.io/jobset
        [[ -x $bin/jobset-$JOBSET_NEWEST_VERSION ]] || build_module_main "jobset-$JOBSET_NEWEST_VERSION" sigs.k8s.io/jobset "$JOBSET_NEWEST_VERSION" sigs.k8s.io/jobset
        [[ -x $bin/kueue-$KUEUE_VERSION ]] || build_module_main "kueue-$KUEUE_VERSION" sigs.k8s.io/kueue "$KUEUE_VERSION" sigs.k8s.io/kueue/cmd/kueue
        [[ -x $bin/kwok ]] || build_module_main kwok sigs.k8s.io/kwok "$KWOK_VERSION" sigs.k8s.io/kwok/cmd/kwok
        all_built
        say "built: $bin"
        echo "$bin"
        ;;
    dir)
        echo "$bin"
        all_built
        ;;
    start)
        python=${PWDEPLOY_PYTHON:-$here/../.venv/bin/python}
        if [[ -e $state || -L $state ]]; then
            private "$state"
            if running "$state"; then
                say "already running (scripts/control-plane.sh stop first)"; cat "$state/env"; exit 0
            fi
            rm -rf "$state"
        fi
        mkdir -m 700 "$state"  # fails if someone made it meanwhile: never a folder of theirs
        "$0" build >/dev/null
        (cd "$here/.." && exec nohup "$python" -m tests.control_plane run "$state" >"$state/run.log" 2>&1) &
        echo $! >"$state/pid"
        for _ in $(seq 1 120); do
            [[ -f $state/env ]] && { cat "$state/env"; exit 0; }
            kill -0 "$(cat "$state/pid")" 2>/dev/null || break
            sleep 1
        done
        say "did not start; see $state/run.log and $state/logs"
        cat "$state/run.log" >&2
        exit 1
        ;;
    env)
        [[ -e $state || -L $state ]] || { say "not running (scripts/control-plane.sh start)"; exit 1; }
        private "$state"
        [[ -f $state/env ]] || { say "not running (scripts/control-plane.sh start)"; exit 1; }
        cat "$state/env"
        ;;
    stop)
        [[ -e $state || -L $state ]] || exit 0
        private "$state"
        if [[ -f $state/pid ]]; then
            pid=$(cat "$state/pid")
            if running "$state"; then
                kill "$pid" && while kill -0 "$pid" 2>/dev/null; do sleep 0.2; done
                say "stopped"
            else
                say "pid $pid in $state/pid is not this control plane (it ended): nothing stopped"
            fi
            rm -f "$state/pid" "$state/env"
        fi
        ;;
    *)
        echo "usage: scripts/control-plane.sh build|dir|start|env|stop" >&2
        exit 2
        ;;
esac
