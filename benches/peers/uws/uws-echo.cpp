// The uWebSockets contestant of benches/run-echo.sh: `uws-echo PORT
// [COMPRESSION]`, an echo server on one thread listening on 127.0.0.1
// (PORT may be given as 127.0.0.1:PORT, as benches/run-callgrind.sh does),
// without compression unless COMPRESSION names uWebSockets' option:
// `shared` (SHARED_COMPRESSOR) or `dedicated:Nk` (DEDICATED_COMPRESSOR_NKB,
// N one of 3 4 8 16 32 64 128 256), each with the shared decompressor, the
// default; with compression on, every echo is sent compressed.
// It echoes text and binary messages unchanged (up to 128 MiB), sends no
// pings, never times out an idle connection and never drops a slow reader,
// so that it does the same work as benches/src/bin/echo_peer.rs.
#include "App.h"

#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>

static uWS::CompressOptions compression(const char *name) {
    const std::string n = name;
    if (n == "off") return uWS::DISABLED;
    if (n == "shared") return uWS::SHARED_COMPRESSOR;
    const struct { const char *name; uWS::CompressOptions option; } sizes[] = {
        {"dedicated:3k", uWS::DEDICATED_COMPRESSOR_3KB},
        {"dedicated:4k", uWS::DEDICATED_COMPRESSOR_4KB},
        {"dedicated:8k", uWS::DEDICATED_COMPRESSOR_8KB},
        {"dedicated:16k", uWS::DEDICATED_COMPRESSOR_16KB},
        {"dedicated:32k", uWS::DEDICATED_COMPRESSOR_32KB},
        {"dedicated:64k", uWS::DEDICATED_COMPRESSOR_64KB},
        {"dedicated:128k", uWS::DEDICATED_COMPRESSOR_128KB},
        {"dedicated:256k", uWS::DEDICATED_COMPRESSOR_256KB},
    };
    for (const auto &s : sizes) {
        if (n == s.name) return s.option;
    }
    std::cerr << "unknown compression " << n << std::endl;
    std::exit(2);
}

int main(int argc, char **argv) {
    // PORT, or an address whose port follows its last colon.
    const char *given = argc > 1 ? argv[1] : "9001";
    const char *colon = std::strrchr(given, ':');
    const int port = std::atoi(colon ? colon + 1 : given);
    static const uWS::CompressOptions option = compression(argc > 2 ? argv[2] : "off");
    struct Conn {};
    uWS::App()
        .ws<Conn>("/*", {
            .compression = option,
            .maxPayloadLength = 128 * 1024 * 1024,
            .idleTimeout = 0,
            .maxBackpressure = 256 * 1024 * 1024,
            .closeOnBackpressureLimit = false,
            .resetIdleTimeoutOnSend = false,
            .sendPingsAutomatically = false,
            .message = [](auto *ws, std::string_view msg, uWS::OpCode op) {
                ws->send(msg, op, option != uWS::DISABLED);
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
