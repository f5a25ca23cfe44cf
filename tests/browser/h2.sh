#!/usr/bin/env bash
# Browser test of WebSockets over HTTP/2 (RFC 8441): installs Chromium and
# playwright-core if missing (setup.sh), builds and starts examples/h2_server
# with permessage-deflate on a free port, has headless Chromium load its page
# over HTTPS and HTTP/2 and echo on its WebSockets with `node --test`, and
# stops the server.
set -euo pipefail
source "$(cd "$(dirname "$0")" && pwd)/setup.sh"

# CI passes its full feature set, whose test build made the example already.
(cd "$ROOT" && cargo build --features "${H2_FEATURES:-deflate}" --example h2_server)
start_server "h2_server on" "$TARGET_DIR/debug/examples/h2_server" 127.0.0.1:0
# The certificate is generated at start; Chromium is told to trust its key.
SPKI=$(sed -n 's#.*--ignore-certificate-errors-spki-list=\([A-Za-z0-9+/=]*\).*#\1#p' "$SERVER_LOG")
cd "$HERE"
H2_URL=$URL H2_SPKI=$SPKI node --test h2.test.mjs
