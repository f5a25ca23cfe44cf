# Sourced by the browser test scripts: installs Chromium (Debian package)
# and playwright-core if missing, builds the chat example, and defines
# start_chat, which starts a chat server on a free port.
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)

if [ ! -x /usr/bin/chromium ]; then
  apt-get update -q
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium
fi

(cd "$HERE" && [ -d node_modules/playwright-core ] || npm ci --no-audit --no-fund)

(cd "$ROOT" && cargo build --example chat)

PIDS=()
LOGS=()
cleanup() {
  for p in "${PIDS[@]}"; do
    kill "$p" 2>/dev/null || true
    wait "$p" 2>/dev/null || true
  done
  rm -f "${LOGS[@]}"
}
trap cleanup EXIT

# start_chat ARGS...: starts `chat 127.0.0.1:0 ARGS...` (port 0: the OS picks
# a free port) and sets URL to the address it prints.
start_chat() {
  local log
  log=$(mktemp)
  LOGS+=("$log")
  "$ROOT/target/debug/examples/chat" 127.0.0.1:0 "$@" 2>"$log" &
  local pid=$!
  PIDS+=("$pid")
  URL=
  for _ in $(seq 1 100); do
    URL=$(sed -n 's#^chat server on \(http://[^ ]*\)$#\1#p' "$log")
    [ -n "$URL" ] && return 0
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  echo "the chat server did not start" >&2
  cat "$log" >&2
  exit 1
}
