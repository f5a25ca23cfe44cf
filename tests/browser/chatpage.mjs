// Helpers shared by the browser tests: headless Chromium and the chat page.
import { chromium } from 'playwright-core';

export const timeout = 15_000;

/** Headless Chromium as this machine allows it, with `extraArgs` added. */
export function launch(extraArgs = []) {
  return chromium.launch({
    executablePath: process.env.CHROMIUM ?? '/usr/bin/chromium',
    // Without the background-networking flags Chromium keeps trying to reach
    // Google services, which the sandboxed network refuses.
    args: [
      '--headless',
      '--no-sandbox',
      '--disable-gpu',
      '--disable-quic',
      '--no-first-run',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
      ...extraArgs,
    ],
  });
}

/** A chat page in its own browser context (like a separate user), connected. */
export async function openChat(browser, url) {
  const context = await browser.newContext();
  const page = await context.newPage();
  const errors = [];
  page.on('pageerror', (e) => errors.push(e));
  await page.goto(url, { timeout });
  await page.locator('#status', { hasText: /^connected$/ }).waitFor({ timeout });
  return { page, errors };
}

export async function say(page, text) {
  await page.fill('#input', text);
  await page.click('#send');
}

/** Waits until `page` lists a chat line containing `text`; returns the line. */
export async function heard(page, text, wait = timeout) {
  const line = page.locator('#messages li', { hasText: text });
  await line.first().waitFor({ timeout: wait });
  return line.first().textContent();
}
