#!/usr/bin/env bash
# Builds the docs as docs.rs does (Cargo.toml's [package.metadata.docs.rs]:
# its features, `--cfg docsrs`, a nightly rustdoc) and checks that gated
# items carry their feature labels: rustdoc's `doc_cfg` is on only under
# `docsrs` (src/lib.rs), and a label that silently disappears would leave
# readers guessing which feature an API needs.
#
# The stable toolchain stands in for docs.rs' nightly through
# RUSTC_BOOTSTRAP=1, which lets it accept `#![feature(doc_cfg)]`.
set -euo pipefail
cd "$(dirname "$0")/.."
features=$(python3 scripts/docs-rs-features.py)
RUSTC_BOOTSTRAP=1 RUSTDOCFLAGS="--cfg docsrs -Dwarnings" \
    cargo doc --no-deps -p wavesock --features "$features"
# The core's own page on docs.rs: every feature (its manifest says so).
RUSTC_BOOTSTRAP=1 RUSTDOCFLAGS="--cfg docsrs -Dwarnings" \
    cargo doc --no-deps -p wavesock-proto --all-features
doc=$(cargo metadata --format-version 1 --no-deps |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')/doc/wavesock

fail=0
# expect FILE FEATURE-TEXT: the page of a gated item names its feature(s).
expect() {
    if ! grep -q "Available on <strong>crate feature[s]* $2</strong> only" "$doc/$1"; then
        echo "docs.rs label missing: $1 should say it needs $2" >&2
        fail=1
    fi
}
expect deflate/index.html '<code>deflate</code>'
expect hub/index.html '<code>hub</code>'
expect topics/index.html '<code>topics</code>'
expect proxy/index.html '<code>proxy</code>'
expect topics/redis/index.html '<code>topics</code> and <code>redis</code>'
expect upgrade/index.html '<code>hyper</code>'
expect axum/index.html '<code>axum</code>'
expect http2/index.html '<code>http2</code>'
expect fn.connect_async_tls_with_config.html '<code>rustls</code> or <code>native-tls</code>'
# The internal `__tls` feature must never show.
if grep -rlq '__tls' "$doc"; then
    echo "docs.rs pages mention the internal feature __tls:" >&2
    grep -rl '__tls' "$doc" | head -5 >&2
    fail=1
fi
[ "$fail" = 0 ] && echo "docs.rs build: feature labels present"
exit $fail
