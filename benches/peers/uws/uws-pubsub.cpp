// The uWebSockets contestant of benches/run-topics.sh: `uws-pubsub PORT`, a
// pub/sub server on one thread listening on 127.0.0.1:PORT, without
// compression, where every connection subscribes to one topic when it opens.
// It sends no pings, never times out an idle connection and never drops a
// slow reader (64 MiB of backpressure, closeOnBackpressureLimit off), so that
// a burst of 50 publishes of 1 KiB reaches all of 10 000 subscribers.
// A plain TCP control listener on 127.0.0.1:PORT+1 speaks the protocol of
// benches/src/bin/topics_server.rs, one command per line, one answer each:
//   subscribers     -> subscribers N   (app.numSubscribers of the topic)
//   cpu             -> cpu TOTAL_NS USER_NS   (this process, from /proc)
//   publish K SIZE  -> published K REACHED   (K app.publish of a fresh text
//                      message of SIZE bytes, back to back; REACHED is the
//                      subscriber count)
// The control sockets live on the uWebSockets loop (a uSockets context of
// their own), so publishes run on the loop thread as an application's do,
// and are sent when the loop drains the topic tree after the iteration.
#include "App.h"

#include <dirent.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

static const std::string_view TOPIC = "t";
static uWS::App *app;

// A message of `size` bytes, exactly as tick(seq, size) in topics_server.rs
// makes it: JSON-like price ticks whose digits come from a small LCG seeded
// by `seq`.
static std::string tick(uint64_t seq, size_t size) {
    static const char *const symbols[8] = {
        "EURUSD", "GBPUSD", "USDJPY", "AUDUSD", "USDCHF", "NZDUSD", "USDCAD", "EURGBP",
    };
    uint64_t state = seq * 6364136223846793005ULL + 1442695040888963407ULL;
    auto next = [&state]() {
        state = state * 6364136223846793005ULL + 1442695040888963407ULL;
        return state >> 33;
    };
    std::string text = "{\"seq\":" + std::to_string(seq) + ",\"ticks\":[";
    char item[128];
    while (text.size() < size) {
        const char *sym = symbols[next() % 8];
        const unsigned long long bid = next() % 200000;
        const unsigned long long spread = next() % 40;
        const unsigned long long qty = next() % 10000;
        const int n = std::snprintf(item, sizeof item, "{\"s\":\"%s\",\"b\":1.%05llu,\"a\":1.%05llu,\"q\":%llu},",
                                    sym, bid, bid + spread, qty);
        text.append(item, (size_t) n);
    }
    text.resize(size);
    return text;
}

// This process's CPU time in nanoseconds, as topics_server's cpu_ns(): in
// all (its threads' /proc/self/task/*/schedstat) and in user space (utime
// of /proc/self/stat, in clock ticks).
static std::string cpu() {
    unsigned long long total = 0;
    if (DIR *tasks = opendir("/proc/self/task")) {
        while (struct dirent *t = readdir(tasks)) {
            if (t->d_name[0] == '.') continue;
            std::ifstream stat(std::string("/proc/self/task/") + t->d_name + "/schedstat");
            unsigned long long ns = 0;
            if (stat >> ns) total += ns;
        }
        closedir(tasks);
    }
    unsigned long long user = 0;
    std::ifstream file("/proc/self/stat");
    const std::string stat((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
    // The fields after the command name (which may hold spaces), from field
    // 3 on: utime is field 14.
    const size_t paren = stat.rfind(')');
    if (paren != std::string::npos) {
        std::istringstream fields(stat.substr(paren + 2));
        std::string field;
        for (int i = 0; i < 12 && fields >> field; i++) {
            if (i == 11) user = std::strtoull(field.c_str(), nullptr, 10) * (1000000000ULL / (unsigned long long) sysconf(_SC_CLK_TCK));
        }
    }
    return "cpu " + std::to_string(total) + " " + std::to_string(user);
}

static bool number(const std::string &word, unsigned long long &value) {
    if (word.empty() || word.find_first_not_of("0123456789") != std::string::npos) return false;
    value = std::strtoull(word.c_str(), nullptr, 10);
    return true;
}

// One control connection: what it sent that is not a whole line yet, what
// is still to write, and its publish counter (per connection, as in
// topics_server).
struct Control {
    std::string in, out;
    uint64_t seq = 0;
};

static Control *&control(us_socket_t *s) {
    return *(Control **) us_socket_ext(0, s);
}

static std::string answer(Control &c, const std::string &line) {
    std::istringstream in(line);
    std::vector<std::string> words;
    for (std::string w; in >> w;) words.push_back(w);
    if (words.size() == 1 && words[0] == "subscribers") {
        return "subscribers " + std::to_string(app->numSubscribers(TOPIC));
    }
    if (words.size() == 1 && words[0] == "cpu") {
        return cpu();
    }
    unsigned long long k = 0, size = 0;
    if (words.size() == 3 && words[0] == "publish" && number(words[1], k) && number(words[2], size)) {
        for (unsigned long long i = 0; i < k; i++) {
            // Made per publish, as an application would with fresh data.
            const std::string msg = tick(c.seq++, size);
            app->publish(TOPIC, msg, uWS::OpCode::TEXT, false);
        }
        const unsigned int reached = k > 0 ? app->numSubscribers(TOPIC) : 0;
        return "published " + words[1] + " " + std::to_string(reached);
    }
    return "error unknown command \"" + line + "\"";
}

static us_socket_t *flush(us_socket_t *s) {
    Control &c = *control(s);
    if (!c.out.empty()) {
        const int n = us_socket_write(0, s, c.out.data(), (int) c.out.size(), 0);
        c.out.erase(0, (size_t) n);
    }
    return s;
}

static us_socket_t *on_data(us_socket_t *s, char *data, int length) {
    Control &c = *control(s);
    c.in.append(data, (size_t) length);
    size_t start = 0, end;
    while ((end = c.in.find('\n', start)) != std::string::npos) {
        std::string line = c.in.substr(start, end - start);
        if (!line.empty() && line.back() == '\r') line.pop_back();
        c.out += answer(c, line) + "\n";
        start = end + 1;
    }
    c.in.erase(0, start);
    return flush(s);
}

static void listen_control(int port) {
    us_socket_context_options_t options = {};
    us_socket_context_t *context = us_create_socket_context(0, (us_loop_t *) uWS::Loop::get(), 0, options);
    us_socket_context_on_open(0, context, [](us_socket_t *s, int, char *, int) {
        control(s) = new Control;
        return s;
    });
    us_socket_context_on_data(0, context, on_data);
    us_socket_context_on_writable(0, context, flush);
    us_socket_context_on_end(0, context, [](us_socket_t *s) {
        return us_socket_close(0, s, 0, nullptr);
    });
    us_socket_context_on_close(0, context, [](us_socket_t *s, int, void *) {
        delete control(s);
        return s;
    });
    us_socket_context_on_timeout(0, context, [](us_socket_t *s) { return s; });
    us_socket_context_on_long_timeout(0, context, [](us_socket_t *s) { return s; });
    us_socket_context_on_connect_error(0, context, [](us_socket_t *s, int) { return s; });
    if (!us_socket_context_listen(0, context, "127.0.0.1", port, 0, sizeof(Control *))) {
        std::cerr << "cannot listen on " << port << std::endl;
        std::exit(1);
    }
}

int main(int argc, char **argv) {
    const int port = argc > 1 ? std::atoi(argv[1]) : 9001;
    // A descriptor per connection: 10 000 need more than the usual soft
    // limit of 1 024.
    struct rlimit files;
    if (getrlimit(RLIMIT_NOFILE, &files) == 0) {
        files.rlim_cur = files.rlim_max;
        setrlimit(RLIMIT_NOFILE, &files);
    }
    struct Conn {};
    uWS::App server;
    app = &server;
    server
        .ws<Conn>("/*", {
            .compression = uWS::DISABLED,
            .maxPayloadLength = 16 * 1024,
            .idleTimeout = 0,
            .maxBackpressure = 64 * 1024 * 1024,
            .closeOnBackpressureLimit = false,
            .resetIdleTimeoutOnSend = false,
            .sendPingsAutomatically = false,
            .open = [](auto *ws) { ws->subscribe(TOPIC); },
            // What peers send is ignored.
            .message = [](auto *, std::string_view, uWS::OpCode) {},
        })
        .listen("127.0.0.1", port, [port](auto *socket) {
            if (!socket) {
                std::cerr << "cannot listen on " << port << std::endl;
                std::exit(1);
            }
        });
    listen_control(port + 1);
    // run-topics.sh waits for "control on" in this line.
    std::cerr << "uws-pubsub on 127.0.0.1:" << port << ", control on 127.0.0.1:" << port + 1 << std::endl;
    server.run();
}
