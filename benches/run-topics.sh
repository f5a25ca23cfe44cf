#!/usr/bin/env bash
# Topics fan-out: one publish of a 1 KiB PreparedMessage to every one of
# N subscribed connections, through the hub's topics (HubHandle::publish)
# against the WebSocketStream path (a task per connection), plain and with
# permessage-deflate. Builds topics_server and topics_load, then for each
# round runs every mode in turn, plain then deflate, each on a fresh
# server (pinned to CPU 1; the client to CPU 0). The mode `uws` runs
# uWebSockets' pub/sub instead of topics_server: the program
# benches/peers/uws/uws-pubsub.cpp, built as benches/peers/uws/README.md
# says, at benches/peers/uws/uws-pubsub or where UWS_PUBSUB names it; left
# out with a note when there is none, and never in the deflate rows.
#
# usage: benches/run-topics.sh [--subscribers N] [--messages K] [--rounds R]
#                              [--modes "hub stream stream-loop"] [--size S]
#                              [--port P] [--out DIR] [--no-build]
#                              [--policy POLICY] [--no-deflate]
#   --subscribers N  connections, each subscribed to the one topic (default 10000)
#   --messages K     publishes one at a time, then K in one burst (default 50)
#   --rounds R       rounds; the table shows medians over them (default 3)
#   --modes "..."    topics_server modes, and uws (default "hub stream stream-loop")
#   --size S         bytes per message (default 1024)
#   --port P         first port; each server start takes two more (default 19600)
#   --out DIR        results.jsonl and table.md (default target/topics-bench)
#   --no-build       use the binaries already built
#   --policy POLICY  the deflate rows' DeflatePolicy (default takeover; shared,
#                    dedicated:4k, ...)
#   --no-deflate     plain rows only (the deflate rows take most of a round)
set -euo pipefail

subscribers=10000
messages=50
rounds=3
modes="hub stream stream-loop"
size=1024
port=19600
out=
build=1
policy=takeover
deflate=1
while [[ $# -gt 0 ]]; do
    case "$1" in
        --subscribers) subscribers=$2; shift 2 ;;
        --messages) messages=$2; shift 2 ;;
        --rounds) rounds=$2; shift 2 ;;
        --modes) modes=$2; shift 2 ;;
        --size) size=$2; shift 2 ;;
        --port) port=$2; shift 2 ;;
        --out) out=$2; shift 2 ;;
        --no-build) build=0; shift ;;
        --policy) policy=$2; shift 2 ;;
        --no-deflate) deflate=0; shift ;;
        -h|--help) sed -n '2,27p' "$0"; exit 0 ;;
        *) echo "unknown option $1" >&2; exit 2 ;;
    esac
done

cd "$(dirname "$0")/.."
if [[ $build == 1 ]]; then
    cargo build --profile bench -p wavesock-benches --bin topics_server --bin topics_load
fi
target=${CARGO_TARGET_DIR:-target}
bin=$target/release
out=${out:-$target/topics-bench}
# uWebSockets' pub/sub server (C++, one thread), speaking topics_server's
# control protocol; see benches/peers/uws/README.md for building it.
uws=${UWS_PUBSUB:-$(pwd)/benches/peers/uws/uws-pubsub}
if [[ " $modes " == *" uws "* ]]; then
    if [[ ! -x $uws ]]; then
        echo "note: no uWebSockets pub/sub server at $uws (set UWS_PUBSUB; see" \
            "benches/peers/uws/README.md): uws left out" >&2
        kept=
        for mode in $modes; do [[ $mode == uws ]] || kept+="$mode "; done
        modes=$kept
    else
        echo "note: uws-pubsub runs without compression: no uws-deflate rows" >&2
    fi
fi
mkdir -p "$out"
results=$out/results.jsonl
: >"$results"

# Each process needs a descriptor per connection: 10 000 each fits a hard
# limit of 20 000.
ulimit -n "$(ulimit -Hn)"

SERVER=
cleanup() { [ -n "$SERVER" ] && kill "$SERVER" 2>/dev/null; true; }
trap cleanup EXIT

# run MODE LABEL [--deflate]: a fresh server, the client against it, and
# the server's peak resident memory added to the client's JSON line.
run() {
    local mode=$1 label=$2; shift 2
    local log=$out/server-$label.log
    local server_args=()
    [[ " $* " != *" --deflate "* ]] || server_args=(--policy "$policy")
    if [[ $mode == uws ]]; then
        # It takes the control on the port after this one, as topics_server.
        taskset -c 1 "$uws" "$port" 2>"$log" &
    else
        taskset -c 1 "$bin/topics_server" --mode "$mode" "$@" "${server_args[@]}" "127.0.0.1:$port" 2>"$log" &
    fi
    SERVER=$!
    for _ in $(seq 1 50); do
        grep -q "control on" "$log" && break
        sleep 0.1
    done
    local line
    if line=$(taskset -c 0 "$bin/topics_load" --addr "127.0.0.1:$port" \
        --subscribers "$subscribers" --messages "$messages" --size "$size" \
        --label "$label" "$@"); then
        local hwm
        hwm=$(awk '/^VmHWM/ {print $2}' "/proc/$SERVER/status")
        echo "$line" | grep '^{' | sed "s/}\$/,\"server_hwm_kib\":$hwm}/" >>"$results"
        echo "$line" | grep '^#'
    else
        echo "# $label: failed (server log: $log)" >&2
    fi
    kill "$SERVER" 2>/dev/null || true
    wait "$SERVER" 2>/dev/null || true
    SERVER=
    # Two ports per server (WebSocket and control), never reused in a run.
    port=$((port + 2))
}

for r in $(seq 1 "$rounds"); do
    echo "# round $r of $rounds"
    for mode in $modes; do
        run "$mode" "$mode"
    done
    for mode in $modes; do
        [[ $deflate == 1 && $mode != uws ]] || continue
        run "$mode" "$mode-deflate" --deflate
    done
done

"$bin/topics_load" table "$results" | tee "$out/table.md"
