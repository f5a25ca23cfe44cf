#!/usr/bin/env bash
# Echo servers side by side: builds echo_peer and loadgen, runs every workload
# against every implementation on 127.0.0.1, and prints a markdown table with
# ratios relative to fastwebsockets.
#
# usage: benches/run-echo.sh [options]
#   --quick           1 round, 2 s windows, 0.5 s warm-up, 2000 idle
#                     connections (about 2 minutes)
#   --rounds N        repeat the whole matrix N times; the table keeps the
#                     best figure of each cell (default 2)
#   --secs N          measured window per run in seconds (default 3)
#   --warmup N        warm-up per run in seconds (default 1)
#   --idle-conns N    connections for the idle-memory run (default 10000;
#                     up to about 19000 with a hard limit of 20000 open
#                     files: the server holds them all in one process, the
#                     load generator spreads them over processes)
#   --impls "A B"     implementations to run, among fastwebsockets uws
#                     wavesock hub tokio-websockets tokio-tungstenite
#                     (default: all six, in that order; `uws` is
#                     uWebSockets, benches/peers/uws/uws-echo or $UWS_ECHO,
#                     skipped with a note when that program is missing; `hub` is
#                     `echo_peer hub`, wavesock's second engine). An
#                     implementation whose server does not start is left
#                     out of the remaining runs with a note.
#   --only "W1 W2"    workloads to run (default: all but idle19k):
#                       pingpong16     64 connections, 16 B ping-pong
#                       pingpong       64 connections, 1 KiB ping-pong
#                       many5          4096 connections, 5 B ping-pong
#                                      (HttpArena's echo-ws)
#                       throughput64k  16 connections, 64 KiB
#                       throughput16m  1 connection, 16 MiB
#                       pipelined      1 connection, 64 x 1 KiB in flight
#                       idle           VmRSS per idle connection at
#                                      --idle-conns connections
#                       idle19k        the same at 19000 connections, about
#                                      the most a 20000 open-files limit
#                                      allows one server (slow)
#   --port N          first TCP port to use (default 19300); each server
#                     start takes the next one
#   --out DIR         where results go (default target/echo-bench)
#   --no-build        use the binaries already built
#   --base BIN        an A/B run: BIN is an echo_peer built from another
#                     commit, run as the implementation `wavesock-base`
#                     (or `hub-base`, its hub, when named in --impls)
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
# are measured close together in time. Only 127.0.0.1 is ever targeted
# (the idle runs connect from 127.0.0.2, 127.0.0.3, ..., one address per
# load-generator process).
set -euo pipefail

rounds=2
secs=3
warmup=1
idle_conns=10000
impls="fastwebsockets uws wavesock hub tokio-websockets tokio-tungstenite"
only="pingpong16 pingpong many5 throughput64k throughput16m pipelined idle"
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
        -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d'; exit 0 ;;
        *) echo "unknown option $1" >&2; exit 2 ;;
    esac
done

for impl in $impls; do
    case $impl in
        fastwebsockets|uws|wavesock|hub|tokio-websockets|tokio-tungstenite) ;;
        wavesock-base|hub-base) [[ -n $base ]] || { echo "$impl needs --base BIN" >&2; exit 2; } ;;
        *) echo "unknown implementation $impl" >&2; exit 2 ;;
    esac
done
for workload in $only; do
    case $workload in
        pingpong16|pingpong|many5|throughput64k|throughput16m|pipelined|idle|idle19k) ;;
        *) echo "unknown workload $workload" >&2; exit 2 ;;
    esac
done

cd "$(dirname "$0")/.."
if [[ $build == 1 ]]; then
    cargo build --profile bench -p wavesock-benches --bins
fi
# The bench profile inherits from release and shares its output directory,
# which is under CARGO_TARGET_DIR (or build.target-dir) when that is set.
target_dir=$(cargo metadata --format-version 1 --no-deps |
    sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')
bin=${target_dir:-target}/release
# uWebSockets' echo server (C++, one thread): the program is
# benches/peers/uws/uws-echo.cpp; see the README there for building it.
uws=${UWS_ECHO:-$(pwd)/benches/peers/uws/uws-echo}
if [[ " $impls " == *" uws "* && ! -x $uws ]]; then
    echo "note: $uws not found (see benches/peers/uws/README.md); running without uWebSockets" >&2
    impls=${impls//uws/}
fi
if [[ -n $base ]]; then
    base=$(realpath "$base")
    [[ " $impls " == *"-base "* ]] || impls="wavesock-base $impls"
fi
mkdir -p "$out"
results="$out/results.jsonl"
: > "$results"

source benches/servers.sh

start_server() { # IMPL PORT
    local log="$out/echo_peer-$1.log"
    if [[ $1 == uws ]]; then
        # It prints "listening on PORT" to stdout.
        "${server_pin[@]}" "$uws" "$2" > "$log" 2>&1 &
    elif [[ $1 == wavesock-base || $1 == hub-base ]]; then
        "${server_pin[@]}" "$base" "${1%-base}" "127.0.0.1:$2" 2> "$log" &
    else
        "${server_pin[@]}" "$bin/echo_peer" "$1" "127.0.0.1:$2" 2> "$log" &
    fi
    server_pid=$!
    for _ in $(seq 100); do
        grep -q listening "$log" 2> /dev/null && return 0
        # Exited already (an implementation echo_peer does not know, a
        # taken port): no need to wait the full 5 s.
        kill -0 "$server_pid" 2> /dev/null || break
        sleep 0.05
    done
    echo "note: the $1 server did not start ($(tail -n 1 "$log" 2> /dev/null)); see $log;" \
        "leaving $1 out of the remaining runs" >&2
    return 1
}

# Implementations whose server failed to start: one that cannot start
# (echo_peer without it, say) should cost a note, not the whole run.
failed_impls=
run() { # IMPL LOADGEN-ARGS...
    local impl=$1
    shift
    [[ " $failed_impls " != *" $impl "* ]] || return 0
    port=$((port + 1))
    if ! start_server "$impl" "$port"; then
        stop_server
        failed_impls="$failed_impls $impl"
        return 0
    fi
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
                many5) run "$impl" pingpong --conns 4096 --size 5 "${timing[@]}" ;;
                throughput64k) run "$impl" throughput --conns 16 --size 64KiB "${timing[@]}" ;;
                throughput16m) run "$impl" throughput --conns 1 --size 16MiB "${timing[@]}" ;;
                pipelined) run "$impl" pipelined --conns 1 --inflight 64 --size 1KiB "${timing[@]}" ;;
                idle) run "$impl" idle --conns "$idle_conns" --settle 2 ;;
                idle19k) run "$impl" idle --conns 19000 --settle 2 ;;
            esac
        done
    done
done

echo
echo "Machine: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $(uname -sr); $(rustc --version)"
echo "Command: benches/run-echo.sh --rounds $rounds --secs $secs --warmup $warmup --idle-conns $idle_conns --impls \"$impls\" --only \"$only\""
if [[ -n $failed_impls ]]; then
    echo "note: left out because their server did not start:$failed_impls"
fi
echo
"$bin/loadgen" table "$results" | tee "$out/table.md"
