#!/usr/bin/env bash
# What `cargo publish` would upload for each publishable crate: only the
# files a user of the crate needs (its sources, the documents its rustdoc
# includes, the license texts the manifest names), and a .crate no larger
# than it should be. Catches a fuzz corpus, Autobahn reports, benches or
# test fixtures slipping into the package when the manifest's `include`
# list or the tree changes.
#
#   bash scripts/check-package.sh             check the packages
#   bash scripts/check-package.sh --self-test show that a stray file fails
#
# The size is of the compressed .crate that `cargo package` writes; it
# needs no build (--no-verify): `cargo publish --dry-run` in .ci/run
# builds the packages.
set -euo pipefail
cd "$(dirname "$0")/.."

# Compressed .crate size limit in bytes: today's package is about a third
# of it; a doubling of the sources still fits, a stray corpus does not.
MAX_CRATE_BYTES=${MAX_CRATE_BYTES:-600000}

# A packaged path is allowed when it matches one of these (bash patterns).
allowed_path() {
    case "$1" in
    Cargo.toml | Cargo.toml.orig | Cargo.lock | .cargo_vcs_info.json) return 0 ;;
    README.md | CHANGELOG.md | MIGRATING.md | LICENSE-MIT | LICENSE-APACHE) return 0 ;;
    src/*.rs) return 0 ;;
    esac
    return 1
}

# Files the manifest promises; a package without them cannot be published
# under its license or show its docs.
required=(Cargo.toml README.md LICENSE-MIT LICENSE-APACHE src/lib.rs)

check_list() {
    # $1: the crate's name, stdin: `cargo package --list` output.
    local name=$1 bad=() seen=" " f
    while IFS= read -r f; do
        seen+="$f "
        allowed_path "$f" || bad+=("$f")
    done
    if [ ${#bad[@]} -gt 0 ]; then
        echo "$name: files that do not belong in the package:" >&2
        printf '  %s\n' "${bad[@]}" >&2
        return 1
    fi
    for f in "${required[@]}"; do
        case "$seen" in
        *" $f "*) ;;
        *)
            echo "$name: the package lacks $f" >&2
            return 1
            ;;
        esac
    done
}

publishable() {
    # Workspace members whose `publish` is not false.
    cargo metadata --no-deps --format-version 1 | python3 -c '
import json, sys
for p in json.load(sys.stdin)["packages"]:
    if p.get("publish") != []:
        print(p["name"])'
}

if [ "${1:-}" = --self-test ]; then
    # A stray fixture in src/ and a corpus listed by mistake must fail.
    if printf 'Cargo.toml\nREADME.md\nLICENSE-MIT\nLICENSE-APACHE\nsrc/lib.rs\nfuzz/corpus/x\n' |
        check_list self-test 2> /dev/null; then
        echo "self-test: a fuzz corpus file passed the check" >&2
        exit 1
    fi
    if printf 'Cargo.toml\nREADME.md\nLICENSE-MIT\nsrc/lib.rs\n' | check_list self-test 2> /dev/null; then
        echo "self-test: a package without LICENSE-APACHE passed the check" >&2
        exit 1
    fi
    printf 'Cargo.toml\nREADME.md\nLICENSE-MIT\nLICENSE-APACHE\nsrc/lib.rs\nsrc/message.rs\n' |
        check_list self-test
    echo "check-package self-test: ok"
    exit 0
fi

status=0
names=$(publishable)
# Packaged together: wavesock depends on wavesock-proto at the same
# version, which only a packaging of both resolves before it is published.
cargo package --no-verify --allow-dirty -q $(printf -- '-p %s ' $names)
for name in $names; do
    list=$(cargo package --list --allow-dirty -p "$name")
    check_list "$name" <<< "$list" || status=1
    version=$(cargo metadata --no-deps --format-version 1 |
        python3 -c "import json,sys; print(next(p['version'] for p in json.load(sys.stdin)['packages'] if p['name']=='$name'))")
    crate="${CARGO_TARGET_DIR:-target}/package/$name-$version.crate"
    bytes=$(stat -c %s "$crate")
    files=$(wc -l <<< "$list")
    if [ "$bytes" -gt "$MAX_CRATE_BYTES" ]; then
        echo "$name: the .crate is $bytes bytes, over $MAX_CRATE_BYTES" >&2
        status=1
    fi
    echo "$name $version: $files files, $bytes bytes compressed"
done
exit $status
