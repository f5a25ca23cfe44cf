#!/usr/bin/env bash
# Builds benches/peers/uws/uws-echo against uWebSockets 66dcff3 and uSockets
# 86097c4 (Apache-2.0): epoll, no TLS, zlib for permessage-deflate, -O3
# -flto, C++20. The sources are cloned into target/uws-src (UWS_SRC), from
# GitHub or from local mirrors named by UWS_GIT_BASE (a directory holding
# uWebSockets/ and uSockets/ git repositories). Needs git, a C++20 compiler
# and zlib's headers; on Debian, installs zlib1g-dev when they are missing.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
src=${UWS_SRC:-$root/target/uws-src}
base=${UWS_GIT_BASE:-https://github.com/uNetworking}
out=${1:-$here/uws-echo}

fetch() { # name commit
    if [[ ! -d $src/$1/.git ]]; then
        git clone -q "$base/$1" "$src/$1"
    fi
    git -C "$src/$1" -c advice.detachedHead=false checkout -q "$2"
}
mkdir -p "$src"
fetch uWebSockets 66dcff3
fetch uSockets 86097c4

if [[ ! -e /usr/include/zlib.h ]]; then
    sudo=$([[ $(id -u) == 0 ]] || echo sudo)
    $sudo apt-get install -y -q zlib1g-dev > /dev/null
fi

objs=$src/objs
mkdir -p "$objs"
for c in "$src"/uSockets/src/*.c "$src"/uSockets/src/eventing/*.c "$src"/uSockets/src/crypto/*.c; do
    cc -O3 -flto -DLIBUS_NO_SSL -I"$src/uSockets/src" -c "$c" -o "$objs/$(basename "$c" .c).o"
done
c++ -std=c++20 -O3 -flto -DLIBUS_NO_SSL -I"$src/uWebSockets/src" -I"$src/uSockets/src" \
    "$here/uws-echo.cpp" "$objs"/*.o -lz -o "$out"
echo "built $out"
