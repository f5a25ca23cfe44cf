#!/usr/bin/env bash
# permessage-deflate memory per idle connection, in one run: the hub, the
# Stream (examples/hub_echo.rs, examples/echo_server.rs with --deflate
# POLICY) and uWebSockets (benches/peers/uws/uws-echo with its compression
# option), each under each policy, against the same server without
# compression. Each row is `loadgen idle`: N connections (default 10 000)
# offer permessage-deflate as Chromium does and echo one 300-byte message
# compressed; VmRSS growth of the server divided by N. Then, unless
# `--only idle`, the corpus rows (`deflate_corpus`): the chat lines of
# benches/corpus/chat.jsonl, each a message, over 16 connections, and the
# larger JSON document benches/corpus/doc.json, whole, over 4: the
# server's compressed bytes (ratio raw / compressed) and its CPU time per
# message under each policy.
#
#   benches/run-deflate.sh [--conns N] [--out DIR] [--impls "hub stream uws"]
#                          [--policies "off takeover shared dedicated:4k"]
#                          [--only idle|corpus]
#
# uws-echo (benches/peers/uws/uws-echo, or the binary UWS_ECHO names) is
# not built here: without it uWebSockets is left out of the table with a
# note. uWebSockets has no "takeover" policy of its own (its
# DEDICATED_COMPRESSOR_256KB is the nearest) and is left out of that row.
set -euo pipefail
conns=10000
out=target/bench-deflate
impls="hub stream uws"
policies="off takeover shared dedicated:4k"
only="idle corpus"
while [[ $# -gt 0 ]]; do
    case $1 in
        --conns) conns=$2; shift 2 ;;
        --out) out=$2; shift 2 ;;
        --impls) impls=$2; shift 2 ;;
        --policies) policies=$2; shift 2 ;;
        --only) only=$2; shift 2 ;;
        *) echo "unknown option $1" >&2; exit 2 ;;
    esac
done
cd "$(dirname "$0")/.."
cargo build -q --profile bench -p wavesock-benches --bin loadgen --bin deflate_corpus
cargo build -q --profile bench --features deflate --example hub_echo --example echo_server
target_dir=$(cargo metadata --format-version 1 --no-deps |
    sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')
bin=${target_dir:-target}/release
uws=${UWS_ECHO:-$(pwd)/benches/peers/uws/uws-echo}
if [[ " $impls " == *" uws "* && ! -x $uws ]]; then
    echo "note: no uWebSockets echo server at $uws (set UWS_ECHO; see" \
        "benches/peers/uws/README.md): uws left out" >&2
    impls=$(tr ' ' '\n' <<< "$impls" | grep -vx uws | tr '\n' ' ')
fi
mkdir -p "$out"
results="$out/results.jsonl"
: > "$results"
source benches/servers.sh
start() { # IMPL POLICY PORT
    local log="$out/$1-${2/:/-}.log" flag=()
    [[ $2 == off ]] || flag=(--deflate "$2")
    case $1 in
        hub) "${server_pin[@]}" "$bin/examples/hub_echo" "127.0.0.1:$3" "${flag[@]}" 2> "$log" & ;;
        stream) "${server_pin[@]}" "$bin/examples/echo_server" "127.0.0.1:$3" "${flag[@]}" 2> "$log" & ;;
        uws) "${server_pin[@]}" "$uws" "$3" "$2" > "$log" 2>&1 & ;;
        *) echo "unknown implementation $1" >&2; exit 2 ;;
    esac
    server_pid=$!
    for _ in $(seq 100); do
        grep -q listening "$log" 2> /dev/null && break
        sleep 0.05
    done
}
port=19400
for mode in $only; do
    for policy in $policies; do
        for impl in $impls; do
            [[ $impl == uws && $policy == takeover ]] && continue
            [[ $mode == corpus && $policy == off ]] && continue
            port=$((port + 1))
            start "$impl" "$policy" "$port"
            label="$impl ${policy/:/-}"
            if [[ $mode == idle ]]; then
                deflate=on
                [[ $policy == off ]] && deflate=off
                "${client_pin[@]}" "$bin/loadgen" idle --addr "127.0.0.1:$port" --pid "$server_pid" \
                    --conns "$conns" --size 300 --deflate "$deflate" --label "$label" |
                    tee -a "$results" | grep '^#' || echo "# $label idle failed" >&2
            else
                for corpus in "chat.jsonl off 16 3" "doc.json on 4 20"; do
                    set -- $corpus
                    "${client_pin[@]}" "$bin/deflate_corpus" --addr "127.0.0.1:$port" \
                        --pid "$server_pid" --file "benches/corpus/$1" --whole "$2" \
                        --conns "$3" --rounds "$4" --label "$label" |
                        tee -a "$results" | grep '^#' || echo "# $label $1 failed" >&2
                done
            fi
            stop_server
        done
    done
done
echo "results: $results"
