import fs from 'node:fs';
import { chromium, type Browser, type BrowserContext } from 'playwright-core';

/** Debian's chromium-headless-shell (.ci/run installs it). */
export const CHROMIUM = '/usr/bin/chromium-headless-shell';
const LOOPBACK = new Set(['127.0.0.1', 'localhost', '[::1]']);

export function isLoopback(url: string): boolean {
  const u = new URL(url);
  if (u.protocol === 'data:' || u.protocol === 'blob:') return true; // never leave the page
  return LOOPBACK.has(u.hostname);
}

export interface LoopbackBrowser {
  browser: Browser;
  context: BrowserContext;
  /** Every URL a page tried outside the machine (each was refused): a test expects it empty. */
  leftTheMachine: string[];
  /** Every URL a page requested, in order. */
  requestUrls: string[];
}

/**
 * Headless Chromium whose pages reach loopback only: every other request and WebSocket is
 * refused and recorded, and whatever got past the routes would meet a dead proxy (loopback
 * bypasses proxies).
 */
export async function launchLoopbackBrowser(viewport: { width: number; height: number }): Promise<LoopbackBrowser> {
  if (!fs.existsSync(CHROMIUM)) {
    throw new Error(`${CHROMIUM} is missing: install the Debian package chromium-headless-shell (apt-get install chromium-headless-shell; .ci/run does)`);
  }
  const leftTheMachine: string[] = [];
  const requestUrls: string[] = [];
  const browser = await chromium.launch({
    executablePath: CHROMIUM,
    args: ['--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update', '--disable-sync', '--no-first-run', '--proxy-server=http://127.0.0.1:9'],
  });
  const context = await browser.newContext({ viewport });
  await context.route('**/*', (route) => {
    const url = route.request().url();
    if (isLoopback(url)) return route.continue();
    leftTheMachine.push(url);
    return route.abort('internetdisconnected');
  });
  await context.routeWebSocket(/.*/, (ws) => {
    if (isLoopback(ws.url())) return void ws.connectToServer();
    leftTheMachine.push(ws.url());
    return void ws.close();
  });
  context.on('request', (request) => {
    requestUrls.push(request.url());
    if (!isLoopback(request.url()) && !leftTheMachine.includes(request.url())) leftTheMachine.push(request.url());
  });
  return { browser, context, leftTheMachine, requestUrls };
}
