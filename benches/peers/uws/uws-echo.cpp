// The uWebSockets contestant of benches/run-echo.sh: `uws-echo PORT`, an
// echo server on one thread with no compression, listening on 127.0.0.1.
// It echoes text and binary messages unchanged (up to 128 MiB), sends no
// pings, never times out an idle connection and never drops a slow reader,
// so that it does the same work as benches/src/bin/echo_peer.rs.
#include "App.h"

#include <cstdlib>
#include <iostream>

int main(int argc, char **argv) {
    const int port = argc > 1 ? std::atoi(argv[1]) : 9001;
    struct Conn {};
    uWS::App()
        .ws<Conn>("/*", {
            .compression = uWS::DISABLED,
            .maxPayloadLength = 128 * 1024 * 1024,
            .idleTimeout = 0,
            .maxBackpressure = 256 * 1024 * 1024,
            .closeOnBackpressureLimit = false,
            .resetIdleTimeoutOnSend = false,
            .sendPingsAutomatically = false,
            .message = [](auto *ws, std::string_view msg, uWS::OpCode op) {
                ws->send(msg, op, false);
            },
        })
        .listen("127.0.0.1", port, [port](auto *socket) {
            // run-echo.sh waits for the port; the line is for a person.
            if (socket) {
                std::cout << "listening on " << port << std::endl;
            } else {
                std::cerr << "cannot listen on " << port << std::endl;
                std::exit(1);
            }
        })
        .run();
}
