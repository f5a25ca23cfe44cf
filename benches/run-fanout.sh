#!/usr/bin/env bash
# Topics across processes: the chat room's fan-out, one process against
# several sharing the room through wavesock's Redis link. Builds the chat
# examples (examples/hub_chat: a hub and its topics; examples/chat: a task
# per guest and a TopicReceiver each) and the fanout client, starts
# redis-server (installing it if missing) on a free port, and for each
# example and configuration starts fresh servers and runs `fanout` against
# them. The Redis leg alone (redis_rtt: PUBLISH round trip and
# publish-to-subscriber on plain sockets) is measured first.
#
# Then the many-topics rows (topics_routing): S servers holding T topics
# between them, what each receives from Redis with a channel per topic
# (wavesock's link) against one channel for all topics, in the same run;
# publishes/s through the link and publish-to-delivery p50/p99.
#
# usage: benches/run-fanout.sh [--clients TOTAL] [--procs "1 2 3"] [--messages K]
#                              [--size S] [--examples "hub_chat chat"] [--no-build]
#                              [--topics T] [--topic-servers "2 4 8"]
#   --clients TOTAL   receiving clients in all (default 200), spread evenly
#   --procs "N ..."   server counts to run through Redis (default "1 2 3");
#                     the single process without Redis always runs first
#   --messages K      lines in the throughput phase (default 2000)
#   --size S          bytes per line (default 64)
#   --examples "E"    which chat servers (default "hub_chat chat")
#   --topics T        topics in the many-topics rows (default 1000; 0 skips them)
#   --topic-servers "S ..."  server counts for them (default "2 4 8")
#
# Prints a markdown table: publish-to-last-receipt latency (p50, p99, max,
# one line at a time) and lines/s and deliveries/s (lines × clients) with
# up to 32 lines in flight.
set -euo pipefail

total=200
procs="1 2 3"
examples="hub_chat chat"
topics=1000
topic_servers="2 4 8"
messages=2000
size=64
build=1
while [[ $# -gt 0 ]]; do
    case "$1" in
        --clients) total=$2; shift 2 ;;
        --procs) procs=$2; shift 2 ;;
        --messages) messages=$2; shift 2 ;;
        --size) size=$2; shift 2 ;;
        --examples) examples=$2; shift 2 ;;
        --topics) topics=$2; shift 2 ;;
        --topic-servers) topic_servers=$2; shift 2 ;;
        --no-build) build=0; shift ;;
        -h|--help) sed -n '2,29p' "$0"; exit 0 ;;
        *) echo "unknown option $1" >&2; exit 2 ;;
    esac
done

cd "$(dirname "$0")/.."
if [[ $build == 1 ]]; then
    cargo build --profile bench --example chat --example hub_chat
    cargo build --profile bench -p wavesock-benches --bin fanout --bin redis_rtt --bin topics_routing
fi
if ! command -v redis-server >/dev/null; then
    apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q redis-server
fi

PIDS=()
stop_all() {
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
    PIDS=()
}
REDIS=
cleanup() { stop_all; [ -n "$REDIS" ] && kill "$REDIS" 2>/dev/null; rm -rf "$TMP"; }
TMP=$(mktemp -d)
trap cleanup EXIT

free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
REDIS_PORT=$(free_port)
redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save '' --appendonly no >/dev/null &
REDIS=$!

# start_servers EXAMPLE N [--redis URL]: N chat servers; sets URLS.
start_servers() {
    local example=$1 n=$2; shift 2
    URLS=
    for i in $(seq 1 "$n"); do
        local log=$TMP/chat-$i.log
        target/release/examples/$example 127.0.0.1:0 "$@" 2>"$log" &
        PIDS+=($!)
        local url=
        for _ in $(seq 1 100); do
            url=$(sed -n 's#^chat server on http://\([^/]*\)/$#ws://\1/ws#p' "$log")
            [ -n "$url" ] && break
            sleep 0.1
        done
        [ -n "$url" ] || { echo "chat server $i did not start" >&2; cat "$log" >&2; exit 1; }
        URLS=${URLS:+$URLS,}$url
    done
}

echo "| configuration | servers × clients | p50 | p99 | max | lines/s | deliveries/s |"
echo "| --- | --- | --- | --- | --- | --- | --- |"
for _ in $(seq 1 50); do
    target/release/redis_rtt --addr "127.0.0.1:$REDIS_PORT" --count 10 >/dev/null 2>&1 && break
    sleep 0.1
done
target/release/redis_rtt --addr "127.0.0.1:$REDIS_PORT" --count 2000 --size "$size"
for example in $examples; do
    start_servers "$example" 1
    target/release/fanout --urls "$URLS" --clients "$total" --messages "$messages" --size "$size" \
        --label "$example, one process" | grep '^|'
    stop_all
    for n in $procs; do
        start_servers "$example" "$n" --redis "redis://127.0.0.1:$REDIS_PORT/"
        target/release/fanout --urls "$URLS" --clients $((total / n)) --messages "$messages" --size "$size" \
            --label "$example, $n process(es) through Redis" | grep '^|'
        stop_all
    done
done

if [[ $topics -gt 0 ]]; then
    for n in $topic_servers; do
        echo
        target/release/topics_routing --redis "redis://127.0.0.1:$REDIS_PORT/" --servers "$n" \
            --topics "$topics" --messages $((topics * 20)) --size "$size"
    done
fi
