// End-to-end: two chat servers share one room through Redis. One headless
// Chromium page on each; a line typed on one appears on the other; Redis is
// restarted and the room recovers. redis.sh starts the chat servers (with
// --redis on REDIS_PORT) and passes their addresses; this test runs
// redis-server itself so that it can restart it.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import net from 'node:net';
import { heard, launch, openChat, say, timeout } from './chatpage.mjs';

const urlA = process.env.CHAT_URL_A;
const urlB = process.env.CHAT_URL_B;
const redisPort = Number(process.env.REDIS_PORT);

let browser;
let redis;

/** Starts redis-server on REDIS_PORT, without persistence, and waits for it. */
async function startRedis() {
  redis = spawn('redis-server', ['--port', String(redisPort), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'], {
    stdio: 'ignore',
  });
  const deadline = Date.now() + timeout;
  for (;;) {
    const up = await new Promise((resolve) => {
      const s = net.connect(redisPort, '127.0.0.1', () => { s.end(); resolve(true); });
      s.on('error', () => resolve(false));
    });
    if (up) return;
    assert.ok(Date.now() < deadline, 'redis-server did not start');
    await new Promise((r) => setTimeout(r, 100));
  }
}

async function stopRedis() {
  const exited = new Promise((resolve) => redis.once('exit', resolve));
  redis.kill('SIGTERM');
  await exited;
  redis = undefined;
}

/**
 * Says fresh lines on `from` until one is heard on `to`: the servers join
 * the room (reconnecting with backoff) in their own time. Returns the line
 * as `to` shows it.
 */
async function untilHeard(from, to, label) {
  const deadline = Date.now() + 3 * timeout;
  for (let i = 0; ; i++) {
    const text = `${label} ${i} ${Math.random().toString(36).slice(2)}`;
    await say(from.page, text);
    try {
      return { text, line: await heard(to.page, text, 1_000) };
    } catch (e) {
      if (Date.now() > deadline) throw e;
    }
  }
}

before(async () => {
  assert.ok(urlA && urlB && redisPort, 'run through redis.sh');
  await startRedis();
  browser = await launch();
});

after(async () => {
  await browser?.close();
  if (redis) await stopRedis();
});

test('two servers share a room through Redis and recover when it restarts', async () => {
  const a = await openChat(browser, urlA);
  const b = await openChat(browser, urlB);

  // Each page says which server it is on.
  const serverA = (await a.page.textContent('#server')).replace('server: ', '');
  const serverB = (await b.page.textContent('#server')).replace('server: ', '');
  assert.equal(`http://${serverA}/`, urlA);
  assert.equal(`http://${serverB}/`, urlB);

  // A line typed on one server's page reaches the other's, named with its server.
  const ab = await untilHeard(a, b, 'from A');
  assert.match(ab.line, new RegExp(`^guest \\d+@${serverA.replaceAll('.', '\\.')}: ${ab.text}$`));
  const ba = await untilHeard(b, a, 'from B');
  assert.match(ba.line, new RegExp(`^guest \\d+@${serverB.replaceAll('.', '\\.')}: ${ba.text}$`));

  // Redis goes away: both rooms are told they are split.
  await stopRedis();
  await heard(a.page, 'the room is split');
  await heard(b.page, 'the room is split');
  // Meanwhile a server's own guests still hear each other.
  const a2 = await openChat(browser, urlA);
  const local = `local while split ${Math.random().toString(36).slice(2)}`;
  await say(a.page, local);
  await heard(a2.page, local);

  // Redis is back: the room is whole again, both ways.
  await startRedis();
  await heard(a.page, 'the room is whole again');
  await heard(b.page, 'the room is whole again');
  await untilHeard(a, b, 'after restart from A');
  await untilHeard(b, a, 'after restart from B');

  assert.deepEqual([...a.errors, ...b.errors, ...a2.errors], [], 'no script errors in the pages');
});
