// End-to-end: two headless Chromium pages on examples/chat talk to each
// other. run.sh starts the server and passes its address in CHAT_URL.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { heard, launch, openChat as open, say } from './chatpage.mjs';

const url = process.env.CHAT_URL;

let browser;

before(async () => {
  assert.ok(url, 'set CHAT_URL to the chat server, e.g. http://127.0.0.1:8080/');
  browser = await launch();
});

after(async () => {
  await browser?.close();
});

const openChat = () => open(browser, url);

test('a message typed in one page appears in the other, both ways', async () => {
  const a = await openChat();
  const b = await openChat();
  const nonce = Math.random().toString(36).slice(2);

  const fromA = `hello from A ${nonce}`;
  await say(a.page, fromA);
  assert.match(await heard(b.page, fromA), new RegExp(`^guest \\d+: ${fromA}$`));
  // The sender sees its own line too: everyone gets the same broadcast.
  assert.match(await heard(a.page, fromA), new RegExp(`^guest \\d+: ${fromA}$`));
  assert.equal(await a.page.inputValue('#input'), '', 'the input is cleared after sending');

  const fromB = `réponse de B ✓ ${nonce}`;
  await say(b.page, fromB);
  assert.match(await heard(a.page, fromB), new RegExp(`^guest \\d+: ${fromB}$`));

  // Enter sends as well as the button does.
  const enter = `sent with Enter ${nonce}`;
  await a.page.fill('#input', enter);
  await a.page.press('#input', 'Enter');
  await heard(b.page, enter);

  // A and B speak under different names.
  const nameA = (await heard(b.page, fromA)).split(':')[0];
  const nameB = (await heard(a.page, fromB)).split(':')[0];
  assert.notEqual(nameA, nameB);

  assert.deepEqual([...a.errors, ...b.errors], [], 'no script errors in the pages');
  await a.page.context().close();
  await b.page.context().close();
});

test('a page that leaves is announced to the others', async () => {
  const a = await openChat();
  const b = await openChat();
  const nonce = Math.random().toString(36).slice(2);
  await say(b.page, `I am B ${nonce}`);
  const nameB = (await heard(a.page, `I am B ${nonce}`)).split(':')[0];
  await b.page.context().close();
  await heard(a.page, `${nameB} left`);
  await a.page.context().close();
});
