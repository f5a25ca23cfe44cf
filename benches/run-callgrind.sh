#!/usr/bin/env bash
# User-space instructions per echoed message of echo servers, under
# callgrind: the steadiest measure on a noisy machine, for A/B comparisons.
#
#   bash benches/run-callgrind.sh [--rounds N] [--conns C] [--size S] LABEL=SERVER...
#
# Each SERVER is a command that takes the listening address as its last
# argument (`target/release/examples/hub_echo`, an older build of it, a
# peer from benches/peers/). Each round runs every server twice under
# `valgrind --tool=callgrind`, with `loadgen pingpong` (C connections, S
# bytes) measuring for 3 s and for 9 s after a 1 s warm-up; the slope
#   (instructions in the 9 s run - in the 3 s run) / (echoes - echoes)
# cancels start-up, handshakes and the warm-up. Servers alternate within
# each round, so drift on the machine falls on all of them alike. Prints
# each round's figure and the median per label.
#
# Example, old and new builds of the hub at 1 024 x 5 B:
#   bash benches/run-callgrind.sh --conns 1024 --size 5 \
#       old=/tmp/old/hub_echo new=target/release/examples/hub_echo
# and the hub's two readiness paths:
#   bash benches/run-callgrind.sh owned=target/release/examples/hub_echo \
#       "tokio=target/release/examples/hub_echo --readiness tokio"
set -euo pipefail
cd "$(dirname "$0")/.."

rounds=3
conns=64
size=16
servers=()
while [ $# -gt 0 ]; do
    case "$1" in
    --rounds) rounds=$2; shift 2 ;;
    --conns) conns=$2; shift 2 ;;
    --size) size=$2; shift 2 ;;
    -h | --help) sed -n '2,22p' "$0"; exit 0 ;;
    *=*) servers+=("$1"); shift ;;
    *) echo "run-callgrind: unknown argument $1 (see --help)" >&2; exit 2 ;;
    esac
done
[ ${#servers[@]} -gt 0 ] || { echo "run-callgrind: no LABEL=SERVER given" >&2; exit 2; }
command -v valgrind > /dev/null || { echo "run-callgrind: needs valgrind" >&2; exit 2; }

cargo build --release -q -p wavesock-benches --bin loadgen
target=$(cargo metadata --format-version 1 --no-deps |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')
loadgen=$target/release/loadgen
work=$(mktemp -d)
trap 'kill $(jobs -p) 2> /dev/null || true; rm -rf "$work"' EXIT

free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# run LABEL SERVER SECS: "instructions echoes" of one run.
run() {
    local label=$1 server=$2 secs=$3 port out pid messages
    port=$(free_port)
    out="$work/$label.$secs.out"
    # shellcheck disable=SC2086 # SERVER may carry arguments
    # --trace-children: a SERVER of the form `env VAR=VALUE BINARY` is
    # measured as BINARY (exec keeps the output file).
    valgrind --tool=callgrind --trace-children=yes --callgrind-out-file="$out" $server "127.0.0.1:$port" \
        > "$work/$label.log" 2>&1 &
    pid=$!
    for _ in $(seq 600); do
        (exec 3<> "/dev/tcp/127.0.0.1/$port") 2> /dev/null && break
        sleep 0.1
    done
    messages=$("$loadgen" pingpong --addr "127.0.0.1:$port" --conns "$conns" --size "$size" \
        --secs "$secs" --warmup 1 --label "$label" |
        python3 -c 'import json,sys; print(json.loads(next(l for l in sys.stdin if l.startswith("{")))["messages"])')
    # TERM: a background job of a script ignores INT; callgrind writes
    # its totals on a fatal signal too.
    kill -TERM "$pid"
    wait "$pid" 2> /dev/null || true
    local ir
    ir=$(awk '/^(summary|totals):/ {print $2; exit}' "$out")
    [ -n "$ir" ] || { echo "run-callgrind: no callgrind total for $label (see $work/$label.log)" >&2; exit 1; }
    echo "$ir $messages"
}

results="$work/results"
: > "$results"
for round in $(seq "$rounds"); do
    for entry in "${servers[@]}"; do
        label=${entry%%=*}
        server=${entry#*=}
        read -r ir3 m3 <<< "$(run "$label" "$server" 3)"
        read -r ir9 m9 <<< "$(run "$label" "$server" 9)"
        per=$(python3 -c "print(round(($ir9 - $ir3) / max(1, $m9 - $m3)))")
        echo "round $round  $label: $per instructions per echo ($m3 and $m9 echoes)"
        echo "$label $per" >> "$results"
    done
done
echo "median instructions per echo, ${conns} x ${size} B ping-pong:"
python3 - "$results" <<'PY'
import statistics, sys
per = {}
for line in open(sys.argv[1]):
    label, value = line.split()
    per.setdefault(label, []).append(int(value))
for label, values in per.items():
    print(f"  {label}: {statistics.median(values):.0f}  (rounds: {values})")
PY
