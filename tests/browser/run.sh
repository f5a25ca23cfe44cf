#!/usr/bin/env bash
# Browser test of examples/chat: installs Chromium and playwright-core if
# missing (setup.sh), starts the chat server on a free port, drives two
# pages with `node --test`, and stops the server.
set -euo pipefail
source "$(cd "$(dirname "$0")" && pwd)/setup.sh"

start_chat
cd "$HERE"
CHAT_URL=$URL node --test chat.test.mjs
