import { test, expect } from '@playwright/test';
import { login, newSession, send, toolCard, expectFinalText } from './helpers';

// SPEC §1 results and onUpdate, as a person sees them on the tool card.

test.beforeEach(async ({ page }) => {
  await login(page);
});

test('a result that violates its outputSchema shows the contract violation and the original content', async ({ page }) => {
  await newSession(page, 'violation', 'faux:violation');
  await send(page, 'Count the things.');
  const card = toolCard(page, 'fixture_violation');
  await expect(card).toContainText('contract violation');
  await expect(card).toContainText('Contract violation:');
  // Every violation, as JSON pointer + message.
  await expect(card).toContainText('/count:');
  // The tool's own content stays visible, marked as the violation's original.
  await expect(card).toContainText('original content: counted many things');
  await expect(card).toContainText('"count": "many"');
  await expect(card.locator('.tool-body')).toHaveAttribute('data-is-error', 'true');
  await expectFinalText(page, 'The tool broke its contract.');
  // The same state after a reload, from the store.
  await page.reload();
  await expect(toolCard(page, 'fixture_violation')).toContainText('original content: counted many things');
  await expect(toolCard(page, 'fixture_violation')).toContainText('contract violation');
});

test('a long tool shows a moving progress bar before its result', async ({ page }) => {
  await newSession(page, 'progress', 'faux:progress');
  await send(page, 'Do the slow thing.');
  const card = toolCard(page, 'fixture_slow');
  const bar = card.getByRole('progressbar', { name: 'Progress of fixture_slow' });
  await expect(bar).toBeVisible();
  const first = Number(await bar.getAttribute('value'));
  // It moves: a later value is higher, and the latest message is shown.
  await expect.poll(async () => Number(await bar.getAttribute('value')), { timeout: 10_000 }).toBeGreaterThan(first);
  await expect(card).toContainText(/step \d of 8/);
  // Then the result replaces it.
  await expect(card).toContainText('finished 8 steps', { timeout: 15_000 });
  await expect(bar).toHaveCount(0);
});

test('the Tools panel changes the active set, and it survives a reload', async ({ page }) => {
  await newSession(page, 'tools', 'faux:demo');
  const panel = page.getByRole('group', { name: 'Tools', exact: true });
  const box = panel.getByRole('checkbox', { name: 'list_files', exact: true });
  await expect(box).toBeChecked();
  // The change is saved by the panel's POST: reload only once the server has answered it (a
  // reload racing the POST was a flake, not a lost change).
  const saved = page.waitForResponse((r) => r.request().method() === 'POST' && /\/sessions\/[^/]+\/tools$/.test(new URL(r.url()).pathname));
  await box.uncheck();
  expect((await saved).ok()).toBeTruthy();
  await expect(panel.getByRole('checkbox', { name: 'list_files', exact: true })).not.toBeChecked();
  await page.reload();
  await expect(page.getByRole('group', { name: 'Tools', exact: true }).getByRole('checkbox', { name: 'list_files', exact: true })).not.toBeChecked();
  await expect(page.getByRole('group', { name: 'Tools', exact: true }).getByRole('checkbox', { name: 'read_file', exact: true })).toBeChecked();
});
