#!/usr/bin/env bash
# Browser test of examples/chat across two servers sharing a room through
# Redis: starts two chat servers with --redis on free ports, and drives one
# page on each with `node --test redis.test.mjs`, which starts, stops and
# restarts redis-server itself. Needs redis-server (skipped without it,
# saying so; a failure under WAVESOCK_TEST_SERVICES=require).
set -euo pipefail
source "$(cd "$(dirname "$0")" && pwd)/setup.sh"
need redis-server "the Debian package redis-server" command -v redis-server

REDIS_PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
start_chat --redis "redis://127.0.0.1:$REDIS_PORT/"
URL_A=$URL
start_chat --redis "redis://127.0.0.1:$REDIS_PORT/"
URL_B=$URL
cd "$HERE"
CHAT_URL_A=$URL_A CHAT_URL_B=$URL_B REDIS_PORT=$REDIS_PORT node --test redis.test.mjs
