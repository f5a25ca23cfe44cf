# Sourced by the bench scripts that start a server and a load generator:
# raises the open-files limit, pins the server to CPU 1 and the client to
# CPU 0 when there are two CPUs (`server_pin`, `client_pin`), and stops the
# server whose pid is in `server_pid` on `stop_server` and at exit.

# 10 000 connections need more than the usual 1024 descriptors; the
# binaries also raise their soft limit to the hard one themselves, and
# uws-echo inherits it.
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true

server_pin=()
client_pin=()
if command -v taskset > /dev/null && [[ $(nproc) -ge 2 ]]; then
    server_pin=(taskset -c 1)
    client_pin=(taskset -c 0)
fi

server_pid=
stop_server() {
    if [[ -n $server_pid ]]; then
        kill "$server_pid" 2> /dev/null || true
        wait "$server_pid" 2> /dev/null || true
        server_pid=
    fi
}
trap stop_server EXIT
