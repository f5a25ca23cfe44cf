#!/usr/bin/env bash
# Cargo's runner in this workspace (.cargo/config.toml): every test binary
# runs under a time limit, so that no test can hang `cargo test` or CI.
#
#   WAVESOCK_TEST_TIMEOUT=SECONDS   the limit per test binary (default 600)
#
# Past the limit the binary is stopped and its name printed; the test
# harness has by then named each test running longer than 60 s ("test X has
# been running for over 60 seconds"), so the overrunning test is named in
# the output. Anything else cargo runs (examples, benches) runs as it is.
set -uo pipefail
bin=$1
case $bin in
*/deps/*) ;;
*) exec "$@" ;;
esac
for arg in "$@"; do
    [ "$arg" != --bench ] || exec "$@"
done
limit=${WAVESOCK_TEST_TIMEOUT:-600}
command -v timeout > /dev/null || exec "$@"
timeout --kill-after=10 "$limit" "$@"
status=$?
if [ "$status" = 124 ] || [ "$status" = 137 ]; then
    echo "test binary $(basename "$bin") stopped after ${limit} s (WAVESOCK_TEST_TIMEOUT);" \
        "the tests it was running are named above ('has been running for over 60 seconds')" >&2
fi
exit "$status"
