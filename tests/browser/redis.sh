#!/usr/bin/env bash
# Browser test of examples/chat across two servers sharing a room through
# Redis: installs redis-server (Debian package) if missing, starts two chat
# servers with --redis on free ports, and drives one page on each with
# `node --test redis.test.mjs`, which starts, stops and restarts
# redis-server itself. Skipped, saying why, only where redis-server cannot
# be installed.
set -euo pipefail
if ! command -v redis-server >/dev/null; then
  apt-get update -q || true
  if ! DEBIAN_FRONTEND=noninteractive apt-get install -y -q redis-server; then
    echo "SKIPPED: redis-server is not installed and could not be installed" >&2
    exit 0
  fi
fi
source "$(cd "$(dirname "$0")" && pwd)/setup.sh"

REDIS_PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
start_chat --redis "redis://127.0.0.1:$REDIS_PORT/"
URL_A=$URL
start_chat --redis "redis://127.0.0.1:$REDIS_PORT/"
URL_B=$URL
cd "$HERE"
CHAT_URL_A=$URL_A CHAT_URL_B=$URL_B REDIS_PORT=$REDIS_PORT node --test redis.test.mjs
