#!/usr/bin/env python3
"""Writes the seed corpus, fuzz/corpus/<target>/, in each target's input
format (see fuzz/src/lib.rs). Run from anywhere; the files are committed,
so this only needs running again when a format changes."""
import os
import struct
import zlib

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")
KEY = b"\x37\xfa\x21\x3d"


def frame(b0, payload, mask=True, width=None):
    n = len(payload)
    m = 0x80 if mask else 0
    if width is None:
        width = 7 if n < 126 else (16 if n < 65536 else 64)
    if width == 7:
        head = bytes([b0, m | n])
    elif width == 16:
        head = bytes([b0, m | 126]) + struct.pack(">H", n)
    else:
        head = bytes([b0, m | 127]) + struct.pack(">Q", n)
    if not mask:
        return head + payload
    return head + KEY + bytes(b ^ KEY[i % 4] for i, b in enumerate(payload))


def write(target, name, data):
    d = os.path.join(ROOT, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def frame_decoder():
    # [flags: role bit, chunk-size count << 1][frame limit][message limit][sizes] wire
    def seed(name, wire, client=False, sizes=b"", lim=(0xFF, 0xFF)):
        flags = (1 if client else 0) | (len(sizes) << 1)
        write("frame_decoder", name, bytes([flags, *lim]) + sizes + wire)

    for client in (False, True):
        side = "client" if client else "server"
        mask = not client  # a server reads masked frames, a client unmasked
        f = lambda b0, p, **kw: frame(b0, p, mask=mask, **kw)
        seed(f"{side}_text", f(0x81, b"Hello, wavesock"), client)
        seed(f"{side}_binary", f(0x82, bytes(range(40))), client)
        seed(f"{side}_empty_text", f(0x81, b""), client)
        seed(f"{side}_text_utf8", f(0x81, "κόσμε 🌍".encode()), client, sizes=b"\x03\x01")
        seed(f"{side}_fragmented", f(0x01, b"Hel") + f(0x00, b"lo, ") + f(0x80, b"world"), client)
        seed(f"{side}_fragmented_ping", f(0x02, b"ab") + f(0x89, b"ping") + f(0x80, b"cd"), client, sizes=b"\x05")
        seed(f"{side}_ping", f(0x89, b"payload"), client)
        seed(f"{side}_pong", f(0x8A, b""), client)
        seed(f"{side}_close_normal", f(0x88, struct.pack(">H", 1000) + b"bye"), client)
        seed(f"{side}_close_empty", f(0x88, b""), client)
        seed(f"{side}_len16", f(0x82, b"x" * 300), client, sizes=b"\x07\x40")
        seed(f"{side}_len64", f(0x82, b"y" * 200, width=64), client)
    # Limits and violations (server side).
    seed("too_big_frame_len16", frame(0x82, b"z" * 600), lim=(0x10, 0xFF))
    seed("too_big_message_fragments", frame(0x02, b"a" * 60) + frame(0x80, b"b" * 60), lim=(0xFF, 0x08))
    seed("too_big_len64_header_only", bytes([0x82, 0xFF]) + struct.pack(">Q", 1 << 40) + KEY)
    seed("bad_utf8", frame(0x81, b"\xce\xba\xe1\xbd\xb9\xcf\x83\xce\xbc\xce\xb5\xed\xa0\x80edited"))
    seed("bad_utf8_fragmented", frame(0x01, b"\xce") + frame(0x80, b"\x41"))
    seed("unmasked_from_client", frame(0x81, b"hi", mask=False))
    seed("reserved_opcode", frame(0x83, b""))
    seed("rsv_bits", frame(0xC1, b"x"))
    seed("long_ping", frame(0x89, b"p" * 126))
    seed("fragmented_ping", frame(0x09, b""))
    seed("orphan_continuation", frame(0x80, b"x"))
    seed("close_one_byte", frame(0x88, b"\x03"))
    seed("close_bad_code", frame(0x88, struct.pack(">H", 1005)))
    seed("close_bad_reason", frame(0x88, struct.pack(">H", 1000) + b"\xff"))


def utf8():
    # [n][n piece sizes] text
    def seed(name, text, sizes=b""):
        write("utf8", name, bytes([len(sizes)]) + sizes + text)

    seed("ascii", b"Hello-wavesock")
    seed("greek_split", "κόσμε".encode(), b"\x01\x01\x01")
    seed("cjk", "日本語のテキスト".encode(), b"\x02\x04")
    seed("emoji_split", "🌍🌎🌏".encode(), b"\x01\x02\x03")
    seed("max_code_point", b"\xf4\x8f\xbf\xbf", b"\x02")
    seed("overlong", b"\xc0\xaf", b"\x01")
    seed("surrogate", b"a\xed\xa0\x80b", b"\x02")
    seed("too_high", b"\xf4\x90\x80\x80", b"\x03")
    seed("truncated", b"ab\xe2\x82", b"\x01")
    seed("lone_continuation", b"\x80abc")


CHROMIUM = (
    b"GET /chat HTTP/1.1\r\n"
    b"Host: localhost:9001\r\n"
    b"Connection: Upgrade\r\n"
    b"Pragma: no-cache\r\n"
    b"Cache-Control: no-cache\r\n"
    b"User-Agent: Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Safari/537.36\r\n"
    b"Upgrade: websocket\r\n"
    b"Origin: http://localhost:8080\r\n"
    b"Sec-WebSocket-Version: 13\r\n"
    b"Accept-Encoding: gzip, deflate, br, zstd\r\n"
    b"Accept-Language: en-US,en;q=0.9\r\n"
    b"Sec-WebSocket-Key: x3JJHMbDL1EzLkh9GBhXDw==\r\n"
    b"Sec-WebSocket-Extensions: permessage-deflate; client_max_window_bits\r\n"
    b"\r\n"
)
FIREFOX = (
    b"GET /chat HTTP/1.1\r\n"
    b"Host: localhost:9001\r\n"
    b"User-Agent: Mozilla/5.0 (X11; Linux x86_64; rv:133.0) Gecko/20100101 Firefox/133.0\r\n"
    b"Accept: */*\r\n"
    b"Accept-Language: en-US,en;q=0.5\r\n"
    b"Accept-Encoding: gzip, deflate, br, zstd\r\n"
    b"Sec-WebSocket-Version: 13\r\n"
    b"Origin: http://localhost:8080\r\n"
    b"Sec-WebSocket-Extensions: permessage-deflate\r\n"
    b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
    b"Connection: keep-alive, Upgrade\r\n"
    b"Sec-Fetch-Dest: empty\r\n"
    b"Sec-Fetch-Mode: websocket\r\n"
    b"Sec-Fetch-Site: same-site\r\n"
    b"Pragma: no-cache\r\n"
    b"Cache-Control: no-cache\r\n"
    b"Upgrade: websocket\r\n"
    b"\r\n"
)


def handshake():
    req = lambda name, data: write("handshake", "req_" + name, b"\x00" + data)
    resp = lambda name, data: write("handshake", "resp_" + name, b"\x01" + data)
    req("chromium", CHROMIUM)
    req("firefox", FIREFOX)
    req("chromium_with_frame", CHROMIUM + frame(0x81, b"hi"))
    req("minimal", b"GET / HTTP/1.1\r\nHost: a\r\nUpgrade: websocket\r\nConnection: upgrade\r\n"
        b"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: AQIDBAUGBwgJCgsMDQ4PEA==\r\n\r\n")
    req("post", CHROMIUM.replace(b"GET", b"POST", 1))
    req("version_8", CHROMIUM.replace(b"Version: 13", b"Version: 8"))
    req("http10", CHROMIUM.replace(b"HTTP/1.1", b"HTTP/1.0", 1))
    req("no_key", FIREFOX.replace(b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n", b""))
    req("short_key", FIREFOX.replace(b"dGhlIHNhbXBsZSBub25jZQ==", b"dGhlIHNhbXBsZQ=="))
    req("incomplete", CHROMIUM[:100])
    ok = (b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
          b"Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGJRzbOxK+xOo=\r\n")
    resp("ok", ok + b"\r\n")
    resp("ok_protocol", ok + b"Sec-WebSocket-Protocol: chat\r\n\r\n")
    resp("bad_protocol", ok + b"Sec-WebSocket-Protocol: other\r\n\r\n")
    resp("ok_extension", ok + b"Sec-WebSocket-Extensions: permessage-deflate\r\n\r\n")
    resp("wrong_accept", ok.replace(b"s3pP", b"AAAA") + b"\r\n")
    resp("not_found", b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")
    resp("ok_then_frame", ok + b"\r\n" + frame(0x81, b"hello", mask=False))


def deflate():
    w = lambda name, data: write("deflate", name, data)
    offers = [
        b"permessage-deflate; client_max_window_bits",
        b"permessage-deflate",
        b"permessage-deflate; server_no_context_takeover; client_no_context_takeover",
        b"permessage-deflate; server_max_window_bits=10; client_max_window_bits=12",
        b"x-webkit-deflate-frame, permessage-deflate; client_max_window_bits=15",
        b"permessage-deflate; client_max_window_bits=\"9\"",
        b"permessage-deflate; server_max_window_bits=7",
        b"permessage-deflate; unknown=1, permessage-deflate",
        b"permessage-deflate; server_max_window_bits; server_max_window_bits=9",
    ]
    for i, o in enumerate(offers):
        w(f"headers_{i}", bytes([0, i % 4, 0x00 if i % 2 else 0x35]) + o)
    w("headers_two_lines", bytes([0, 0, 0]) + offers[0] + b"\n" + offers[3])
    for i, cfg in enumerate([(0, 0, 0, 0), (3, 0x21, 0, 0), (0, 0x88, 1, 0x17), (2, 0x00, 1, 0x11)]):
        w(f"agree_{i}", bytes([1, *cfg]))

    def raw(data, wbits=-15, level=6):
        c = zlib.compressobj(level, zlib.DEFLATED, wbits)
        out = c.compress(data) + c.flush(zlib.Z_SYNC_FLUSH)
        assert out.endswith(b"\x00\x00\xff\xff")
        return out[:-4]

    # [2][params][limit byte] compressed payload (the target frames it)
    w("inflate_hello", bytes([2, 0xFF, 0x10]) + raw(b"Hello, wavesock! " * 4))
    w("inflate_bomb", bytes([2, 0xFF, 0x01]) + raw(b"\x00" * 60000, level=9))
    w("inflate_small_window", bytes([2, 0x00, 0x40]) + raw(b"abcdefgh" * 100, wbits=-9))
    w("inflate_garbage", bytes([2, 0x03, 0x08]) + bytes(range(0, 256, 3)))
    # [3][params][sizes count, sizes...][level] messages
    w("round_trip_text", bytes([3, 0x00, 0x02, 0x05, 6]) + b"hello hello hello world world")
    w("round_trip_binary", bytes([3, 0xFF, 0x00, 9]) + bytes(range(256)) * 2)
    w("round_trip_takeover", bytes([3, 0x1C, 0x03, 0x10, 0x20, 1]) + b"the same text again " * 8)


def conn():
    # [role][ping interval][pong timeout][close timeout] then events
    # [op][arg][arg % 8 payload bytes]; ops: 0 ping, 1 pong, 2 close,
    # 3 error, 4 input, 5/6 tick, 7 send, 8 our close, 9 transport end, 10 drain
    E = lambda op, arg=0, payload=b"": bytes([op, arg]) + payload
    w = lambda name, head, *ev: write("conn", name, bytes(head) + b"".join(ev))
    w("ping_pong", [0, 0, 10, 10], E(0, 3, b"abc"), E(10), E(1))
    w("peer_closes", [0, 0, 10, 10], E(0, 1, b"x"), E(2, 8), E(0, 1, b"y"), E(10), E(5, 200), E(10))
    w("we_close", [1, 0, 10, 10], E(7, 0), E(8, 1), E(0, 2, b"zz"), E(2, 0), E(10), E(9), E(5, 100))
    w("keepalive", [0, 5, 5, 10], E(5, 10), E(10), E(4), E(5, 10), E(5, 10), E(10), E(5, 20))
    w("keepalive_dead", [1, 2, 1, 10], E(5, 5), E(5, 5), E(10), E(5, 5))
    w("error_then_ping", [0, 0, 10, 10], E(3, 1), E(0, 1, b"p"), E(10), E(5, 255), E(10))
    w("close_no_clock", [0, 3, 3, 3], E(8, 0), E(5, 1), E(5, 250), E(10))
    w("fragments", [0, 0, 10, 10], E(7, 0), E(7, 2), E(7, 3), E(7, 6), E(7, 1))


def hub():
    # [flags: deflate bit 0, raw bit 1, limits bits 2-3, chunk-size count << 4]
    # [pipe] [sizes] wire; without the raw bit the valid request goes first.
    def seed(name, wire, deflate=False, raw=False, lim=1, sizes=b"", pipe=0):
        flags = (1 if deflate else 0) | (2 if raw else 0) | (lim << 2) | (len(sizes) << 4)
        write("hub", name, bytes([flags, pipe]) + sizes + wire)

    close = frame(0x88, struct.pack(">H", 1000) + b"bye")
    seed("echo_text", frame(0x81, b"Hello, hub") + close)
    seed("echo_binary_len16", frame(0x82, bytes(range(256)) * 2) + close, lim=2, sizes=b"\x07\x40\x01")
    seed("fragmented_ping", frame(0x01, b"Hel") + frame(0x89, b"ping") + frame(0x80, b"lo") + close, sizes=b"\x01\x02")
    seed("ping_pong", frame(0x89, b"payload") + frame(0x8A, b"") + close, pipe=1)
    seed("tiny_pipe", frame(0x81, "κόσμε 🌍".encode()) + close, sizes=b"\x01")
    seed("no_close", frame(0x81, b"then the input ends"))
    seed("cut_mid_frame", frame(0x82, b"x" * 100)[:40])
    seed("bad_utf8", frame(0x81, b"\xce\xba\xff") + close)
    seed("unmasked", frame(0x81, b"plain", mask=False) + close)
    seed("reserved_bits", frame(0xC1, b"x") + close)
    seed("too_big", frame(0x82, b"z" * 600) + close, lim=0)
    seed("huge_length", bytes([0x82, 0xFF]) + struct.pack(">Q", (1 << 63) - 1) + KEY)
    seed("close_bad_code", frame(0x88, struct.pack(">H", 999)))
    comp = zlib.compressobj(6, zlib.DEFLATED, -15)
    data = comp.compress(b"compressed hello " * 8) + comp.flush(zlib.Z_SYNC_FLUSH)
    seed("deflate_text", frame(0xC1, data[:-4]) + close, deflate=True)
    seed("deflate_offer_plain", frame(0x81, b"uncompressed") + close, deflate=True)
    request = (b"GET /fuzz HTTP/1.1\r\nHost: fuzz\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
               b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n")
    seed("raw_request", request + b"\r\n" + frame(0x81, b"hi") + close, raw=True)
    seed("raw_request_deflate", request + b"Sec-WebSocket-Extensions: permessage-deflate\r\n\r\n"
         + frame(0xC1, data[:-4]) + close, raw=True, deflate=True)
    seed("raw_not_upgrade", b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", raw=True)
    seed("raw_garbage", b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03", raw=True)
    seed("raw_unfinished", b"GET / HTTP/1.1\r\nHost: x\r\n", raw=True)


def driver():
    # [role] then events of three bytes: op (% 9), arg, fill. See
    # wavesock_fuzz::driver: 0 text, 1 binary, 2 borrowed data, 3 shared
    # data, 4 prepared, 5 close, 6 peer ping, 7 write, 8 discard (arg
    # >= 0x80) or a blocked write. An odd arg makes a payload of 4 KiB and
    # more (the shared paths).
    mix = [
        (0, 4, 1), (1, 3, 2), (2, 6, 0), (3, 5, 1), (4, 33, 0), (7, 2, 5),
        (6, 4, 3), (8, 0, 0), (7, 3, 200), (4, 2, 9), (5, 2, 0), (0, 2, 0),
        (5, 0, 0), (7, 1, 255),
    ]
    events = bytes(b for e in mix for b in e)
    write("driver", "server_mix", bytes([0]) + events)
    write("driver", "client_mix", bytes([1]) + events)
    cut = [(1, 5, 2), (3, 7, 1), (7, 1, 3), (8, 0x80, 0)]
    write("driver", "discard_mid_frame", bytes([0]) + bytes(b for e in cut for b in e))


def inbox():
    # [flags: 1 the hub's way, 2 a budget of 16 KiB + (flags >> 2) * 2 KiB]
    # [count % 6 + 1] [a byte per message: size class (% 4) and kind (% 5)]
    # then events of two bytes: op (% 8: 0 another connection takes
    # budget, 1 gives it back, 2 the inbox waits), arg (the read's size).
    msgs = bytes([4, 0x21, 0x05, 0x47, 0x12, 0x03])
    events = bytes([3, 1, 3, 40, 2, 7, 11, 200, 3, 255, 2, 0, 3, 9, 19, 90])
    write("inbox", "stream_reads", bytes([0, 5]) + msgs + events)
    write("inbox", "hub_reads", bytes([1, 5]) + msgs + events)
    budget = bytes([0, 60, 3, 30, 1, 0, 3, 200, 3, 200, 2, 0, 1, 0, 3, 255])
    write("inbox", "stream_budget", bytes([2 | (4 << 2), 5]) + msgs + budget)
    write("inbox", "hub_budget", bytes([3 | (4 << 2), 5]) + msgs + budget)


def receive(target="receive"):
    # [flags: 1 client, 2 keepalive, 4 budget of 16 KiB + (flags >> 6) * 8
    # KiB, 8 flush all, 16 garbage after the messages, 32 a close at the
    # end] [count % 6 + 1] [a byte per message: size class (% 4) and kind
    # (% 5)] [with 16: a length % 32 and that many bytes], then events of
    # two bytes: op (% 8 on a read: 5 nothing yet, 6 with arg 0 a reset, 7
    # another connection takes (even arg) or gives back budget; on a flush:
    # 6 some left, 7 blocked or with arg 0 failed; op >> 3 scales the
    # read), arg (the read's size, or the seconds the clock moves on).
    # receive_in reads the same: op & 0x40 makes a cork's worth of replies
    # wait, op & 0x80 answers a read that found nothing without a step.
    msgs = bytes([4, 0x21, 0x05, 0x47, 0x12, 0x03])
    events = bytes([0, 1, 0, 40, 5, 7, 0, 200, 14, 255, 7, 3, 0, 9, 8, 90])
    write(target, "server_reads", bytes([32, 5]) + msgs + events)
    write(target, "client_flush_all", bytes([1 | 8 | 32, 5]) + msgs + events)
    write(target, "keepalive_time", bytes([2, 5]) + msgs + events + bytes([5, 63] * 4))
    budget = bytes([7, 60, 0, 30, 7, 1, 0, 200, 0, 200, 7, 2, 7, 3, 0, 255])
    write(target, "budget", bytes([4 | (1 << 6) | 32, 5]) + msgs + budget)
    write(target, "garbage", bytes([16, 2, 0x21, 0x47, 6]) + b"\x83\x80abcd" + events)
    failing = bytes([0, 3, 6, 0, 0, 50, 7, 0])
    write(target, "failures", bytes([8, 5]) + msgs + failing)


if __name__ == "__main__":
    frame_decoder()
    utf8()
    handshake()
    deflate()
    conn()
    hub()
    driver()
    inbox()
    receive()
    receive("receive_in")
    for t in sorted(os.listdir(ROOT)):
        print(t, len(os.listdir(os.path.join(ROOT, t))))
