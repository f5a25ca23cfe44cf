# Sourced by the browser test scripts: checks for Chromium and
# playwright-core (installing nothing: a missing one skips the test with a
# line saying what to install, or fails it under
# WAVESOCK_TEST_SERVICES=require, as CI runs), and defines start_server,
# which starts a server on a free port and waits for its address, and
# start_chat, which does so for the chat example (built on first use).
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
# Where cargo puts the examples: target/ unless CARGO_TARGET_DIR (or a
# cargo config) says otherwise.
TARGET_DIR=$(cd "$ROOT" && cargo metadata --format-version 1 --no-deps |
  python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')

# need SERVICE INSTALL COMMAND...: true if COMMAND succeeds; otherwise
# skips the test (exit 0) with one line, or fails it under
# WAVESOCK_TEST_SERVICES=require.
need() {
  local service=$1 install=$2
  shift 2
  "$@" >/dev/null 2>&1 && return 0
  if [ "${WAVESOCK_TEST_SERVICES:-}" = require ]; then
    echo "FAILED: needs $service ($install), and WAVESOCK_TEST_SERVICES=require" >&2
    exit 1
  fi
  echo "skipped: needs $service ($install)" >&2
  exit 0
}

need "Chromium at /usr/bin/chromium" "the Debian package chromium" test -x /usr/bin/chromium
need "playwright-core" "the package in tests/browser/node_modules, from its package-lock.json" test -d "$HERE/node_modules/playwright-core"

PIDS=()
LOGS=()
cleanup() {
  local status=$?
  for p in "${PIDS[@]}"; do
    kill "$p" 2>/dev/null || true
    wait "$p" 2>/dev/null || true
  done
  # A failed test is easier to read with what the servers said.
  if [ "$status" -ne 0 ]; then
    for l in "${LOGS[@]}"; do
      echo "--- server log $l:" >&2
      cat "$l" >&2
    done
  fi
  rm -f "${LOGS[@]}"
}
trap cleanup EXIT

# start_server PREFIX COMMAND...: starts COMMAND, which must print the line
# `PREFIX http(s)://ADDRESS/` to stderr once it listens, waits for that
# line, and sets URL to the address and SERVER_LOG to the file holding the
# server's stderr. The server is stopped on exit.
start_server() {
  local prefix=$1
  shift
  local log
  log=$(mktemp)
  LOGS+=("$log")
  SERVER_LOG=$log
  "$@" 2>"$log" &
  local pid=$!
  PIDS+=("$pid")
  URL=
  for _ in $(seq 1 100); do
    URL=$(sed -n "s#^$prefix \(https\?://[^ ]*\)\$#\1#p" "$log")
    [ -n "$URL" ] && return 0
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  echo "$1 did not start" >&2
  exit 1
}

CHAT_BUILT=
# start_chat ARGS...: starts `$CHAT_EXAMPLE 127.0.0.1:0 ARGS...` (the chat
# example by default, or hub_chat; port 0: the OS picks a free port) and
# sets URL to the address it prints.
start_chat() {
  local example=${CHAT_EXAMPLE:-chat}
  if [ "$CHAT_BUILT" != "$example" ]; then
    (cd "$ROOT" && cargo build --example "$example")
    CHAT_BUILT=$example
  fi
  start_server "chat server on" "$TARGET_DIR/debug/examples/$example" 127.0.0.1:0 "$@"
}
