#!/usr/bin/env bash
# Browser test of examples/chat: installs Chromium (Debian package) and
# playwright-core if missing, starts the chat server on a free port, drives
# two pages with `node --test`, and stops the server.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)

if [ ! -x /usr/bin/chromium ]; then
  apt-get update -q
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium
fi

cd "$HERE"
if [ ! -d node_modules/playwright-core ]; then
  npm ci --no-audit --no-fund
fi

cd "$ROOT"
cargo build --example chat
LOG=$(mktemp)
SERVER=
cleanup() {
  if [ -n "$SERVER" ]; then
    kill "$SERVER" 2>/dev/null || true
    wait "$SERVER" 2>/dev/null || true
  fi
  rm -f "$LOG"
}
trap cleanup EXIT

# Port 0: the OS picks a free port; the server prints the address it got.
target/debug/examples/chat 127.0.0.1:0 2>"$LOG" &
SERVER=$!
URL=
for _ in $(seq 1 100); do
  URL=$(sed -n 's#^chat server on \(http://[^ ]*\)$#\1#p' "$LOG")
  [ -n "$URL" ] && break
  kill -0 "$SERVER" 2>/dev/null || { cat "$LOG" >&2; exit 1; }
  sleep 0.1
done
if [ -z "$URL" ]; then
  echo "the chat server did not start" >&2
  cat "$LOG" >&2
  exit 1
fi

cd "$HERE"
CHAT_URL=$URL node --test chat.test.mjs
