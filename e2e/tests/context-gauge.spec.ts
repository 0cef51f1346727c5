import * as fs from 'node:fs';
import * as path from 'node:path';
import { test, expect, type Page } from '@playwright/test';
import { expectFinalText, login, loginAt, newSession, send, startOwnServer } from './helpers';

// Issue 34, acceptance 1: a context gauge shows how full the model's context window is, from the
// last usage the provider reported (input with cache, plus output); with the window unknown, the
// tokens used only. Live and after a reload.

const docs = path.resolve(__dirname, '../../docs');
const gauge = (page: Page) => page.getByTestId('context-gauge');

test('the gauge shows the tokens used when the window is unknown, live and after a reload', async ({ page }) => {
  await login(page);
  await newSession(page, `gauge ${Date.now()}`, 'faux:usage');
  await expect(gauge(page)).toHaveText('none reported yet');
  await send(page, 'Count.');
  await expectFinalText(page, 'Counted.');
  await expect(gauge(page)).toHaveText('2,040 tokens (window unknown)');
  await page.reload();
  await expect(gauge(page)).toHaveText('2,040 tokens (window unknown)');
});

test('with -context-tokens the gauge is a meter of the window', async ({ page }, info) => {
  const server = await startOwnServer(`gauge-${info.workerIndex}`, 0, ['-context-tokens', '32768']);
  try {
    await page.setViewportSize({ width: 1280, height: 800 });
    await loginAt(page, server.baseURL);
    await newSession(page, 'context gauge', 'faux:usage');
    await send(page, 'Count.');
    await expectFinalText(page, 'Counted.');
    await expect(gauge(page)).toHaveText('2,040 of 32,768 tokens (6%)');
    await expect(gauge(page).getByRole('meter', { name: 'Context window used' })).toHaveAttribute('value', '2040');
    await page.reload();
    await expect(gauge(page)).toHaveText('2,040 of 32,768 tokens (6%)');
    if (process.env.DOCS_SHOTS) {
      fs.mkdirSync(docs, { recursive: true });
      await page.screenshot({ path: path.join(docs, 'context-gauge-1280.png') });
      await page.setViewportSize({ width: 390, height: 844 });
      await gauge(page).scrollIntoViewIfNeeded();
      await page.screenshot({ path: path.join(docs, 'context-gauge-390.png') });
    }
  } finally {
    await server.kill();
  }
});
