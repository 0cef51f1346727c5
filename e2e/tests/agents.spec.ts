import * as fs from 'node:fs';
import * as path from 'node:path';
import { test, expect, type Page } from '@playwright/test';
import { login } from './helpers';

// SPEC §18, Connections: the owner connects an agent on the Agents page, copies the token and the
// snippet shown once, sees the connection listed, and revokes it. Screenshots at 1280 and 390 px
// (e2e/screenshots/agents-*.png, checked by eye).

const shots = path.resolve(__dirname, '../screenshots');

/** Nothing on the page scrolls sideways. */
async function noSideways(page: Page): Promise<void> {
  expect(await page.evaluate(() => document.documentElement.scrollWidth - document.documentElement.clientWidth)).toBeLessThanOrEqual(0);
}

test('connections: connect Claude Code, copy the snippet shown once, see it listed, revoke it (1280 and 390 px)', async ({ page, context }) => {
  await context.grantPermissions(['clipboard-read', 'clipboard-write']);
  await login(page);
  await page.getByRole('link', { name: 'Agents', exact: true }).click();
  await expect(page.getByRole('heading', { name: 'Agents', level: 1 })).toBeVisible();

  const label = `alice's laptop ${Date.now().toString(36)}`;
  await page.getByRole('textbox', { name: 'Label', exact: true }).fill(label);
  await page.getByRole('combobox', { name: 'Kind', exact: true }).selectOption('claude-code');
  await page.getByRole('button', { name: 'Connect', exact: true }).click();

  const panel = page.getByRole('region', { name: `Connected: ${label} (Claude Code)` });
  await expect(panel).toBeVisible();
  await expect(panel.getByRole('status')).toContainText('it is shown this once');
  const exportLine = page.locator('#connection-export');
  await expect(exportLine).toContainText(/export COUNTERSIGN_AGENT_TOKEN=cs_agent_[a-z2-7]{32}/);
  const token = (await exportLine.textContent())!.split('=')[1].trim();
  const snippet = page.locator('#connection-snippet');
  await expect(snippet).toContainText('/hooks/claude-code');
  await expect(snippet).toContainText('"onFailure": "block"');
  await expect(panel).toContainText('If Countersign is unreachable:');

  // Copy puts the snippet, exactly as shown, on the clipboard.
  await page.getByRole('button', { name: 'Copy connection-snippet', exact: true }).click();
  await expect(page.getByRole('button', { name: 'Copy connection-snippet', exact: true })).toHaveText('Copied');
  const copied = await page.evaluate(() => navigator.clipboard.readText());
  expect(copied).toBe(await snippet.textContent());
  expect(JSON.parse(copied).hooks.PreToolUse[0].hooks[0].url).toMatch(/\/hooks\/claude-code\?timeout=600$/);

  fs.mkdirSync(shots, { recursive: true });
  for (const width of [1280, 390]) {
    await page.setViewportSize({ width, height: width === 390 ? 844 : 800 });
    await page.screenshot({ path: path.join(shots, `agents-created-${width}.png`), fullPage: true });
    await noSideways(page);
    // The snippet's long lines scroll inside its own box at phone width.
    if (width === 390) {
      expect(await snippet.evaluate((el) => el.scrollWidth > el.clientWidth)).toBe(true);
      const box = (await snippet.boundingBox())!;
      expect(box.x + box.width).toBeLessThanOrEqual(390);
    }
  }

  // A reload: the token is gone; the connection is listed, never used.
  await page.goto('/agents');
  await expect(page.locator('#connection-export')).toHaveCount(0);
  expect(await page.content()).not.toContain(token);
  const row = page.getByRole('row').filter({ hasText: label });
  await expect(row).toContainText('never');
  await expect(row).toContainText('active');
  await page.screenshot({ path: path.join(shots, 'agents-list-390.png'), fullPage: true });
  await noSideways(page);

  // Revoke asks first; dismissing keeps it, accepting revokes it.
  page.once('dialog', (d) => d.dismiss());
  await row.getByRole('button', { name: 'Revoke' }).click();
  await expect(row).toContainText('active');
  page.once('dialog', (d) => d.accept());
  await row.getByRole('button', { name: 'Revoke' }).click();
  await expect(row).toContainText('revoked');
  await expect(row.getByRole('button', { name: 'Revoke' })).toHaveCount(0);
  await page.setViewportSize({ width: 1280, height: 800 });
  await page.screenshot({ path: path.join(shots, 'agents-revoked-1280.png'), fullPage: true });
});
