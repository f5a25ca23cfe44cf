#!/usr/bin/env bash
# The Autobahn TestSuite against wavesock, judged strictly by check.py.
#
#   bash tests/autobahn/run.sh [server] [hub] [client]   (default: all three)
#
#   server  examples/echo_server (the Stream) under kosoku's fuzzingclient
#   hub     examples/hub_echo (the hub) under kosoku's fuzzingclient, its
#           engine reading readiness from a poller of its own
#   hub-tokio
#           the same with a Tokio registration per socket
#           (`--readiness tokio`), the portable readiness path
#   client  examples/autobahn_client against kosoku's fuzzingserver
#   server@POLICY, hub@POLICY, client@POLICY
#           the same server or client with `--deflate POLICY` (shared, dedicated:4k,
#           ...; see DeflatePolicy); its report goes to reports/SIDE with
#           `@` and `:` made `-`. With AUTOBAHN_POLICY_CASES=compression,
#           these run only groups 12 and 13 (216 cases), the ones that
#           negotiate permessage-deflate and so the only ones a policy
#           changes.
#
# AUTOBAHN_PLAIN="SIDE ..." runs those sides without groups 12 and 13 (the
# 301 cases that negotiate no compression). Groups 12 and 13 are 97 % of a
# side's time: about 300 s of the runner and the server at full speed,
# where the other 301 cases take about 10 s.
#
# Installs the runner (PyPI kosoku, pinned) in .venv-autobahn, builds the
# examples in release with permessage-deflate (`--features deflate`), or
# takes them from the directory AUTOBAHN_BIN when that is set (CI runs the
# debug examples its test build made, with every feature on), runs the chosen
# sides side by side, and judges each report in reports/<side> with
# check.py: all 517 cases of groups 1-13 must pass, NON-STRICT and
# UNIMPLEMENTED included as failures. Exit status 1 if any side fails.
#
# Each run is bound by its kosoku process (one Python thread), so on two
# cores the three together take about as long as one and a half alone.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
cd "$ROOT"

KOSOKU_VERSION=0.1.0
CASES=517
sides=("$@")
[ ${#sides[@]} -gt 0 ] || sides=(server hub client)
for s in "${sides[@]}"; do
    case $s in
    server | hub | hub-tokio | client | server@?* | hub@?* | client@?*) ;;
    *)
        echo "unknown side $s (server, hub or client)" >&2
        exit 2
        ;;
    esac
done
want() { [[ " ${sides[*]} " == *" $1 "* ]]; }

installed=$(.venv-autobahn/bin/python -c \
    'import importlib.metadata as m; print(m.version("kosoku"))' 2> /dev/null || true)
if [ "$installed" != "$KOSOKU_VERSION" ]; then
    python3 -m venv .venv-autobahn
    .venv-autobahn/bin/pip install -q "kosoku==$KOSOKU_VERSION"
fi
KOSOKU=$ROOT/.venv-autobahn/bin/kosoku

if [ -n "${AUTOBAHN_BIN:-}" ]; then
    bin=$AUTOBAHN_BIN
else
    cargo build --release --features deflate \
        --example echo_server --example hub_echo --example autobahn_client
    bin=$(cargo metadata --format-version 1 --no-deps |
        python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')/release/examples
fi

PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2> /dev/null || true; done; }
trap cleanup EXIT

wait_port() {
    for _ in $(seq 1 100); do
        if python3 -c "import socket,sys; s=socket.socket(); s.settimeout(0.2); sys.exit(s.connect_ex(('127.0.0.1', $1)))"; then
            return 0
        fi
        sleep 0.1
    done
    echo "nothing listens on port $1" >&2
    return 1
}

mkdir -p reports
WAIT=()
# The report directory of a side.
dir() { local d=${1//@/-}; echo "${d//:/-}"; }
# Which cases a side runs: all (517), compression (groups 12-13, the 216
# cases that negotiate permessage-deflate), or plain (groups 1-11, the 301
# others).
selection() {
    if [[ " ${AUTOBAHN_PLAIN:-} " == *" $1 "* ]]; then
        echo plain
    elif [[ $1 == *@* && ${AUTOBAHN_POLICY_CASES:-} == compression ]]; then
        echo compression
    else
        echo all
    fi
}
# How many cases a side's report must hold.
expect() {
    case $(selection "$1") in
    plain) echo 301 ;;
    compression) echo 216 ;;
    *) echo "$CASES" ;;
    esac
}
# kosoku's case arguments for a side.
case_args() {
    case $(selection "$1") in
    plain) echo "-x 12.* -x 13.*" ;;
    compression) echo "-i 12.* -i 13.*" ;;
    esac
}
# drive SIDE SERVER PORT [ARG...]: starts the example SERVER on PORT
# (with ARGs on its command line) and kosoku's
# fuzzingclient against it, in the background. kosoku exits non-zero on
# any case that is not OK (INFORMATIONAL and UNIMPLEMENTED included): the
# verdict is check.py's, not its status.
drive() {
    local side=$1 server=$2 port=$3 d
    shift 3
    d=$(dir "$side")
    local args=("$@") cases=()
    [[ $side != *@* ]] || args+=(--deflate "${side#*@}")
    read -r -a cases <<< "$(case_args "$side")"
    rm -rf "reports/$d"
    # The servers log every protocol violation the fuzzer commits.
    "$bin/$server" "127.0.0.1:$port" "${args[@]}" 2> "reports/$d-$server.log" &
    PIDS+=($!)
    wait_port "$port"
    ("$KOSOKU" -m fuzzingclient "${cases[@]}" "127.0.0.1:$port" -o "reports/$d" > "reports/$d.log" 2>&1 || true) &
    PIDS+=($!)
    WAIT+=($!)
}
want server && drive server echo_server 9001
want hub && drive hub hub_echo 9003
want hub-tokio && drive hub-tokio hub_echo 9004 --readiness tokio
port=9010
for s in "${sides[@]}"; do
    case $s in
    server@*) drive "$s" echo_server $((port += 1)) ;;
    hub@*) drive "$s" hub_echo $((port += 1)) ;;
    esac
done
# run_client SIDE PORT: kosoku's fuzzingserver on PORT and the client
# against it, in the foreground.
run_client() {
    local side=$1 port=$2 d
    d=$(dir "$side")
    local args=() cases=()
    [[ $side != *@* ]] || args+=(--deflate "${side#*@}")
    read -r -a cases <<< "$(case_args "$side")"
    rm -rf "reports/$d"
    "$KOSOKU" -m fuzzingserver "${cases[@]}" "127.0.0.1:$port" -o "reports/$d" > "reports/$d.log" 2>&1 &
    local fuzz=$!
    PIDS+=($fuzz)
    wait_port "$port"
    "$bin/autobahn_client" "ws://127.0.0.1:$port" "${args[@]}"
    # The reports are written after the updateReports connection: let
    # kosoku finish (it exits by itself once they are written).
    for _ in $(seq 1 600); do
        kill -0 "$fuzz" 2> /dev/null || break
        sleep 0.1
    done
    kill "$fuzz" 2> /dev/null || true
    wait "$fuzz" 2> /dev/null || true
}
if want client; then run_client client 9002; fi
port=9030
for s in "${sides[@]}"; do
    if [[ $s == client@* ]]; then run_client "$s" $((port += 1)); fi
done
for p in "${WAIT[@]}"; do wait "$p"; done

status=0
judge() {
    echo "== autobahn: $1"
    python3 "$HERE/check.py" "reports/$(dir "$1")" --expect "$(expect "$1")" || status=1
}
for s in server hub hub-tokio client; do
    if want "$s"; then judge "$s"; fi
done
for s in "${sides[@]}"; do
    if [[ $s == *@* ]]; then judge "$s"; fi
done
exit $status
