// End-to-end: headless Chromium loads examples/h2_server's page over HTTPS
// and HTTP/2 and runs WebSockets from it, which must travel as extended
// CONNECT streams (RFC 8441) on the page's own HTTP/2 connection. h2.sh
// starts the server (with permessage-deflate) and passes its address in
// H2_URL and its certificate's SPKI hash in H2_SPKI.
//
// The tests share one page and run in order: each builds on the state the
// previous ones left on the server, which /stats reports.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { launch } from './chatpage.mjs';

const url = process.env.H2_URL;
const spki = process.env.H2_SPKI;
const timeout = 30_000;

// Frame length boundaries: 7-bit, 16-bit and 64-bit lengths; 1 MiB.
const SIZES = [0, 1, 125, 126, 65535, 65536, 1 << 20];
const EXPECTED_CHECKS = SIZES.flatMap((bytes) => [
  { type: 'text', bytes },
  { type: 'binary', bytes },
]);

let browser;
let page;
const problems = [];

before(async () => {
  assert.ok(url?.startsWith('https://'), 'set H2_URL to the server, e.g. https://127.0.0.1:9443/');
  assert.ok(spki, 'set H2_SPKI to the certificate SPKI hash the server prints');
  // QUIC (off in launch()) would bypass the TCP connection this test is
  // about; trust the server's self-signed certificate and nothing more.
  browser = await launch([`--ignore-certificate-errors-spki-list=${spki}`]);
  page = await (await browser.newContext()).newPage();
  page.on('pageerror', (e) => problems.push(`page error: ${e}`));
  page.on('console', (m) => {
    if (m.type() === 'error') problems.push(`console error: ${m.text()}`);
  });
});

after(async () => {
  await browser?.close();
});

const stats = () => page.evaluate(() => fetch('/stats').then((r) => r.json()));

test('the page is loaded over HTTPS and HTTP/2', { timeout }, async () => {
  const response = await page.goto(url, { timeout });
  assert.equal(response.status(), 200);
  assert.match(page.url(), /^https:\/\//);
  const protocol = await page.evaluate(
    () => performance.getEntriesByType('navigation')[0].nextHopProtocol,
  );
  assert.equal(protocol, 'h2');
  assert.equal(await page.textContent('#protocol'), 'h2');
});

// Chromium's offer under each compression policy: the answer it gets,
// and messages both ways.
for (const [path, deflate, answer] of [
  ['/echo', true, /^permessage-deflate$/],
  ['/echo-plain', false],
  ['/echo-shared', true, /^permessage-deflate; server_no_context_takeover; client_no_context_takeover$/],
  ['/echo-dedicated', true, /^permessage-deflate; server_max_window_bits=11; client_max_window_bits=11$/],
]) {
  test(`wss://…${path} echoes text and binary messages of 0 B to 1 MiB intact`, { timeout }, async () => {
    // echoTest is the page's own: one WebSocket, every size as text (UTF-8,
    // mostly not ASCII) and as binary, compared byte for byte with what was sent.
    const report = await page.evaluate((p) => echoTest(p), path);
    assert.equal(report.url, new URL(path, url).href.replace(/^https:/, 'wss:'));
    if (deflate) {
      assert.match(report.extensions, answer);
    } else {
      assert.equal(report.extensions, '');
    }
    assert.deepEqual(
      report.checks.map(({ type, bytes }) => ({ type, bytes })),
      EXPECTED_CHECKS,
    );
    const wrong = report.checks.filter((c) => !c.ok).map((c) => `${c.type} ${c.bytes} B`);
    assert.deepEqual(wrong, [], 'every echo equals what was sent');
    assert.deepEqual(report.close, { code: 1000, wasClean: true });
  });
}

test('the server got every WebSocket as an HTTP/2 stream on the page connection', { timeout }, async () => {
  const s = await stats();
  assert.equal(s.websockets_http2, 4, 'four extended CONNECTs');
  assert.equal(s.websockets_http1, 0, 'no HTTP/1.1 upgrade');
  // Everything, page, WebSockets and /stats, went over one TLS connection,
  // which ALPN made HTTP/2: no HTTP/1.1 connection was opened on the side.
  assert.equal(s.tls_connections, 1, JSON.stringify(s));
  assert.equal(s.alpn_h2, 1);
  assert.equal(s.alpn_http1, 0);
  const fetched = await page.evaluate(() =>
    performance.getEntriesByType('resource').filter((e) => e.name.endsWith('/stats')).map((e) => e.nextHopProtocol),
  );
  assert.ok(fetched.length > 0 && fetched.every((p) => p === 'h2'), `/stats over ${fetched}`);
});

test("the page's button runs the same echo test", { timeout }, async () => {
  await page.click('#run');
  const log = page.locator('#log', { hasText: 'server:' });
  await log.waitFor({ timeout });
  const lines = (await log.textContent()).trim().split('\n');
  const origin = new URL(url).host;
  assert.match(lines[0], new RegExp(`^wss://${origin}/echo: extensions "permessage-deflate[^"]*", 14/14 echoes intact$`));
  assert.equal(lines[1], `wss://${origin}/echo-plain: extensions "", 14/14 echoes intact`);
  const shown = JSON.parse(lines[2].replace(/^server: /, ''));
  assert.equal(shown.websockets_http2, 6);
  assert.equal(shown.websockets_http1, 0);
  assert.equal(shown.tls_connections, 1);
  assert.deepEqual(problems, [], 'no script or console errors in the page');
});

test('control: with no HTTP/2 connection to its origin, Chromium upgrades over HTTP/1.1', { timeout }, async () => {
  // Chromium sends a WebSocket over HTTP/2 only on an HTTP/2 connection it
  // already has to the origin; otherwise it opens a connection offering only
  // http/1.1. A page on https://localhost:PORT opening wss://127.0.0.1:PORT
  // (another origin, in a fresh context) does that, and the counters the
  // tests above rely on must tell the difference.
  const before = await stats();
  const context = await browser.newContext();
  const other = await context.newPage();
  const otherErrors = [];
  other.on('pageerror', (e) => otherErrors.push(e));
  const localhost = new URL(url);
  localhost.hostname = 'localhost';
  await other.goto(localhost.href, { timeout });
  const target = new URL('/echo-plain', url).href.replace(/^https:/, 'wss:');
  const echoed = await other.evaluate(
    (u) =>
      new Promise((resolve, reject) => {
        const ws = new WebSocket(u);
        ws.onopen = () => ws.send('über HTTP/1.1');
        ws.onmessage = (e) => {
          resolve(e.data);
          ws.close(1000);
        };
        ws.onerror = () => reject(new Error(`${u} failed`));
      }),
    target,
  );
  assert.equal(echoed, 'über HTTP/1.1');
  const after = await stats();
  assert.equal(after.websockets_http1, before.websockets_http1 + 1, JSON.stringify(after));
  assert.equal(after.websockets_http2, before.websockets_http2);
  assert.equal(after.alpn_http1, before.alpn_http1 + 1);
  assert.deepEqual(otherErrors, []);
  await context.close();
});
