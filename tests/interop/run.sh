#!/usr/bin/env bash
# Interop tests against the Node `ws` package with permessage-deflate on, as
# client and server, messages from 0 bytes to 16 MiB (tests/interop.rs).
# Needs Node 18+ and npm; installs ws (pinned in package.json) here.
set -euo pipefail
cd "$(dirname "$0")"
if [ ! -d node_modules/ws ]; then
  npm install --no-audit --no-fund --silent
fi
cd ../..
# Release (or INTEROP_PROFILE, CI's `ci`): 16 MiB messages through
# zlib-rs are slow unoptimized.
cargo test --profile "${INTEROP_PROFILE:-release}" --features deflate --test interop \
    -- --ignored --test-threads=1 "$@"
