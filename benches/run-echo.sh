#!/usr/bin/env bash
# Echo servers side by side: builds echo_peer and loadgen, runs every workload
# against every implementation on 127.0.0.1, and prints a markdown table with
# ratios relative to fastwebsockets.
#
# usage: benches/run-echo.sh [options]
#   --quick           1 round, 2 s windows, 0.5 s warm-up, 2000 idle
#                     connections (about 1 minute)
#   --rounds N        repeat the whole matrix N times; the table keeps the
#                     best figure of each cell (default 2)
#   --secs N          measured window per run in seconds (default 3)
#   --warmup N        warm-up per run in seconds (default 1)
#   --idle-conns N    connections for the idle-memory run (default 10000)
#   --impls "A B"     implementations to run (default: all five; `uws` is
#                     uWebSockets, ../shared/peers/uws-echo, skipped with a
#                     note when that program is missing)
#   --only "W1 W2"    workloads to run: pingpong16 pingpong throughput64k
#                     throughput16m pipelined idle (default: all)
#   --port N          first TCP port to use (default 19300); each server
#                     start takes the next one
#   --out DIR         where results go (default target/echo-bench)
#   --no-build        use the binaries already built
#   --base BIN        an A/B run: BIN is an echo_peer built from another
#                     commit, run as the implementation `wavesock-base`
#                     right before `wavesock` in every row (add it to
#                     --impls yourself to choose the order; by default it
#                     is put first). Compare with
#                     `loadgen table FILE --baseline wavesock-base`.
#
# Each run starts a fresh `echo_peer IMPL 127.0.0.1:PORT` (pinned to CPU 1
# with taskset when there are at least two CPUs; the load generator is
# pinned to CPU 0), runs one workload, and stops the server, so every run,
# and the idle-memory run in particular, starts from a fresh process. The
# workloads are the outer loop, so the implementations compared in one row
# are measured close together in time. Only 127.0.0.1 is ever targeted.
set -euo pipefail

rounds=2
secs=3
warmup=1
idle_conns=10000
impls="fastwebsockets uws wavesock tokio-websockets tokio-tungstenite"
only="pingpong16 pingpong throughput64k throughput16m pipelined idle"
port=19300
out=target/echo-bench
build=1
base=

while [[ $# -gt 0 ]]; do
    case "$1" in
        --quick) rounds=1; secs=2; warmup=0.5; idle_conns=2000; shift ;;
        --rounds) rounds=$2; shift 2 ;;
        --secs) secs=$2; shift 2 ;;
        --warmup) warmup=$2; shift 2 ;;
        --idle-conns) idle_conns=$2; shift 2 ;;
        --impls) impls=$2; shift 2 ;;
        --only) only=$2; shift 2 ;;
        --port) port=$2; shift 2 ;;
        --out) out=$2; shift 2 ;;
        --no-build) build=0; shift ;;
        --base) base=$2; shift 2 ;;
        -h|--help) sed -n '2,35p' "$0"; exit 0 ;;
        *) echo "unknown option $1" >&2; exit 2 ;;
    esac
done

cd "$(dirname "$0")/.."
if [[ $build == 1 ]]; then
    cargo build --profile bench -p wavesock-benches --bins
fi
# The bench profile inherits from release and shares its output directory.
bin=target/release
# uWebSockets' echo server (C++, one thread), built by the team: see
# ../shared/peers/README.md.
uws=${UWS_ECHO:-$(pwd)/../shared/peers/uws-echo}
if [[ " $impls " == *" uws "* && ! -x $uws ]]; then
    echo "note: $uws not found; running without uWebSockets" >&2
    impls=${impls//uws/}
fi
if [[ -n $base ]]; then
    base=$(realpath "$base")
    [[ " $impls " == *" wavesock-base "* ]] || impls="wavesock-base $impls"
fi
mkdir -p "$out"
results="$out/results.jsonl"
: > "$results"

# 10 000 connections need more than the usual 1024 descriptors; both
# binaries also raise their soft limit to the hard one themselves.
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true

server_pin=()
client_pin=()
if command -v taskset > /dev/null && [[ $(nproc) -ge 2 ]]; then
    server_pin=(taskset -c 1)
    client_pin=(taskset -c 0)
fi

server_pid=
stop_server() {
    if [[ -n $server_pid ]]; then
        kill "$server_pid" 2> /dev/null || true
        wait "$server_pid" 2> /dev/null || true
        server_pid=
    fi
}
trap stop_server EXIT

start_server() { # IMPL PORT
    local log="$out/echo_peer-$1.log"
    if [[ $1 == uws ]]; then
        # It prints "listening on PORT" to stdout.
        "${server_pin[@]}" "$uws" "$2" > "$log" 2>&1 &
    elif [[ $1 == wavesock-base ]]; then
        "${server_pin[@]}" "$base" wavesock "127.0.0.1:$2" 2> "$log" &
    else
        "${server_pin[@]}" "$bin/echo_peer" "$1" "127.0.0.1:$2" 2> "$log" &
    fi
    server_pid=$!
    for _ in $(seq 100); do
        grep -q listening "$log" 2> /dev/null && return 0
        sleep 0.05
    done
    echo "echo_peer $1 did not start; see $log" >&2
    return 1
}

run() { # IMPL LOADGEN-ARGS...
    local impl=$1
    shift
    port=$((port + 1))
    start_server "$impl" "$port"
    "${client_pin[@]}" "$bin/loadgen" "$@" --addr "127.0.0.1:$port" --pid "$server_pid" \
        --label "$impl" | tee -a "$results" | grep '^#' || echo "# $impl $1 failed" >&2
    stop_server
}

timing=(--secs "$secs" --warmup "$warmup")
for round in $(seq "$rounds"); do
    echo "## round $round of $rounds"
    for workload in $only; do
        for impl in $impls; do
            case $workload in
                pingpong16) run "$impl" pingpong --conns 64 --size 16 "${timing[@]}" ;;
                pingpong) run "$impl" pingpong --conns 64 --size 1KiB "${timing[@]}" ;;
                throughput64k) run "$impl" throughput --conns 16 --size 64KiB "${timing[@]}" ;;
                throughput16m) run "$impl" throughput --conns 1 --size 16MiB "${timing[@]}" ;;
                pipelined) run "$impl" pipelined --conns 1 --inflight 64 --size 1KiB "${timing[@]}" ;;
                idle) run "$impl" idle --conns "$idle_conns" --settle 2 ;;
                *) echo "unknown workload $workload" >&2; exit 2 ;;
            esac
        done
    done
done

echo
echo "Machine: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $(uname -sr); $(rustc --version)"
echo "Command: benches/run-echo.sh --rounds $rounds --secs $secs --warmup $warmup --idle-conns $idle_conns --impls \"$impls\" --only \"$only\""
echo
"$bin/loadgen" table "$results" | tee "$out/table.md"
