// Interop peer for wavesock: the Node `ws` package with permessage-deflate.
//
//   node peer.mjs server '<deflate options JSON>'      echo server; prints "port N"
//   node peer.mjs client URL '<deflate options JSON>'  sends messages of every
//       size to an echo server, checks what comes back, exits 0 on success
//
// Text and partly random binary messages, 0 bytes to 16 MiB, as in
// tests/interop.rs.
import { WebSocketServer, WebSocket } from 'ws';

const SIZES = [0, 1, 100, 1023, 1024, 65537, 1 << 20, 16 << 20];

function xorshift(seed) {
  let x = seed >>> 0 || 1;
  return () => {
    x ^= x << 13; x >>>= 0;
    x ^= x >>> 17;
    x ^= x << 5; x >>>= 0;
    return x;
  };
}

// Text: words from a small vocabulary (compresses well), some non-ASCII,
// cut to exactly n bytes on a character boundary.
const WORDS = ['alpha', 'beta', 'gamma', 'delta', 'κόσμε', 'epsilon', '{"id":', '},'];
function text(n, seed) {
  const next = xorshift(seed + 1);
  const out = [];
  let len = 0;
  while (len < n) {
    const w = WORDS[next() % WORDS.length] + ' ';
    out.push(w);
    len += Buffer.byteLength(w);
  }
  let s = out.join('');
  while (Buffer.byteLength(s) > n) s = s.slice(0, -1);
  return Buffer.from(s + 'x'.repeat(n - Buffer.byteLength(s)));
}

// Binary: first half random (incompressible), second half repetitive.
function binary(n, seed) {
  const next = xorshift(seed + 7);
  const b = Buffer.alloc(n);
  for (let i = 0; i < n; i++) b[i] = i < n / 2 ? next() & 0xff : (i % 251);
  return b;
}

const deflateOptions = (json) => ({ threshold: 0, ...JSON.parse(json || '{}') });

const [mode, ...rest] = process.argv.slice(2);
if (mode === 'server') {
  const wss = new WebSocketServer({ host: '127.0.0.1', port: 0, perMessageDeflate: deflateOptions(rest[0]), maxPayload: 64 << 20 });
  wss.on('listening', () => console.log(`port ${wss.address().port}`));
  wss.on('connection', (ws) => {
    ws.on('message', (data, isBinary) => ws.send(data, { binary: isBinary }));
  });
} else if (mode === 'client') {
  const ws = new WebSocket(rest[0], { perMessageDeflate: deflateOptions(rest[1]), maxPayload: 64 << 20 });
  const expected = [];
  SIZES.forEach((n, i) => {
    expected.push([false, text(n, i)]);
    expected.push([true, binary(n, i)]);
  });
  let at = 0;
  // The server's answer as it came, parameters and all (ws.extensions
  // names the extension only).
  let answer = '';
  ws.on('upgrade', (res) => { answer = res.headers['sec-websocket-extensions'] ?? ''; });
  const fail = (why) => { console.error(`FAIL: ${why}`); process.exit(1); };
  ws.on('open', () => {
    if (!ws.extensions.includes('permessage-deflate')) fail(`no compression negotiated: ${ws.extensions}`);
    const [isBinary, data] = expected[0];
    ws.send(isBinary ? data : data.toString('utf8'), { binary: isBinary });
  });
  ws.on('message', (data, isBinary) => {
    const [wantBinary, want] = expected[at];
    if (isBinary !== wantBinary || !Buffer.from(data).equals(want)) fail(`message ${at} (${want.length} bytes) differs`);
    at += 1;
    if (at === expected.length) { ws.close(1000); return; }
    const [b, d] = expected[at];
    ws.send(b ? d : d.toString('utf8'), { binary: b });
  });
  ws.on('close', (code) => {
    if (at !== expected.length) fail(`closed with ${code} after ${at} messages`);
    console.log(`ok: ${at} messages echoed, extensions: ${answer}`);
    process.exit(0);
  });
  ws.on('error', (e) => fail(e.message));
} else {
  console.error('usage: peer.mjs server [json] | client URL [json]');
  process.exit(2);
}
