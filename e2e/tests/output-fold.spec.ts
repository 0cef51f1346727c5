import * as fs from 'node:fs';
import * as path from 'node:path';
import { test, expect } from '@playwright/test';
import { approvalGroup, expectFinalText, login, newSession, send, toolCard } from './helpers';

// Issue 34, acceptance 1: a long output folds as read_file's did — its first lines, "show all N
// lines", a download of the stored output — with one component for every tool. A
// `yes | head -c 20000000` card stays under 1,000 px.

const docs = path.resolve(__dirname, '../../docs');

for (const width of [1280, 390]) {
  test(`a run_command card of yes | head -c 20000000 folds under 1,000 px with "show all" and a download (${width} px)`, async ({ page }) => {
    await page.setViewportSize({ width, height: 900 });
    await login(page);
    await newSession(page, `long output ${width}`, 'faux:yes-output');
    await send(page, 'Print a lot.');
    const card = toolCard(page, 'run_command');
    await approvalGroup(card, 'run_command').getByRole('button', { name: 'Approve', exact: true }).click();
    await expectFinalText(page, 'That was a lot of output.');
    const fold = card.getByTestId('folded-output');
    await expect(fold).toBeVisible();
    await expect(fold.locator('summary')).toHaveText(/^show all \d+ lines$/);
    const box = (await card.boundingBox())!;
    expect(box.height).toBeLessThan(1000);
    // The page keeps the same: a reload draws the fold from the store, with the download.
    await page.reload();
    const again = toolCard(page, 'run_command');
    expect((await again.boundingBox())!.height).toBeLessThan(1000);
    const download = again.getByRole('link', { name: /download/ });
    await expect(download).toBeVisible();
    const res = await page.request.get((await download.getAttribute('href'))!);
    expect(res.status()).toBe(200);
    expect((await res.text()).length).toBeGreaterThan(10_000);
    if (process.env.DOCS_SHOTS) {
      fs.mkdirSync(docs, { recursive: true });
      await again.scrollIntoViewIfNeeded();
      await page.screenshot({ path: path.join(docs, `output-fold-${width}.png`) });
    }
    // "show all" opens the whole output.
    await again.getByTestId('folded-output').locator('summary').click();
    await expect(again.locator('.collapsed-output[open] pre')).toBeVisible();
  });
}
