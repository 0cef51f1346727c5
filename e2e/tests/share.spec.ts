import { test, expect, type Browser, type Page } from '@playwright/test';
import { approvalGroup, expectFinalText, login, newSession, send, toolCard, transcript } from './helpers';

// SPEC §7: share links for reviewers, as a reviewer with a fresh browser (no cookies) sees them.

async function createLink(owner: Page, role: 'viewer' | 'approver', label: string, expiresIn = ''): Promise<string> {
  const panel = owner.locator('#shares-panel');
  await panel.getByRole('combobox', { name: 'Role', exact: true }).selectOption(role);
  await panel.getByRole('textbox', { name: 'Label', exact: true }).fill(label);
  await panel.getByRole('textbox', { name: 'Expires in', exact: true }).fill(expiresIn);
  await panel.getByRole('button', { name: 'Create share link', exact: true }).click();
  const item = panel.getByRole('listitem').filter({ hasText: label });
  const link = item.getByRole('link', { name: /\/r\// });
  await expect(link).toBeVisible();
  const url = (await link.textContent())!.trim();
  expect(await link.getAttribute('href')).toBe(url);
  return url;
}

async function openAsReviewer(browser: Browser, url: string, name: string): Promise<Page> {
  const ctx = await browser.newContext(); // no cookies: not the owner
  const page = await ctx.newPage();
  await page.goto(url);
  await page.getByRole('textbox', { name: 'Your name', exact: true }).fill(name);
  await page.getByRole('button', { name: 'Continue', exact: true }).click();
  await expect(transcript(page)).toBeAttached();
  return page;
}

test('a viewer watches live without controls; an approver decides, recorded with their name', async ({ page, browser }) => {
  await login(page);
  await newSession(page, 'shared session', 'faux:deny');
  const viewerURL = await createLink(page, 'viewer', 'for Val');
  const approverURL = await createLink(page, 'approver', 'for Ada');

  const viewer = await openAsReviewer(browser, viewerURL, 'Val');
  const approver = await openAsReviewer(browser, approverURL, 'Ada');
  for (const p of [viewer, approver]) {
    await expect(p.getByRole('textbox', { name: 'Message', exact: true })).toHaveCount(0);
    await expect(p.getByRole('button', { name: 'Send', exact: true })).toHaveCount(0);
  }

  await send(page, 'Please create the marker.');
  // Live on both reviewer pages.
  const vGroup = approvalGroup(toolCard(viewer, 'run_command'), 'run_command');
  const aGroup = approvalGroup(toolCard(approver, 'run_command'), 'run_command');
  await expect(vGroup).toBeVisible();
  await expect(aGroup).toBeVisible();
  await expect(vGroup.getByRole('button')).toHaveCount(0);
  await expect(viewer.getByRole('button', { name: 'Approve', exact: true })).toHaveCount(0);
  await expect(viewer.getByRole('button', { name: 'Stop', exact: true })).toHaveCount(0);
  await expect(approver.getByRole('button', { name: 'Stop', exact: true })).toHaveCount(0);
  await expect(aGroup.getByRole('button', { name: 'Deny', exact: true })).toBeVisible();

  await aGroup.getByRole('textbox', { name: 'Reason', exact: true }).fill('reviewed: no');
  await aGroup.getByRole('button', { name: 'Deny', exact: true }).click();
  await expect(toolCard(page, 'run_command')).toContainText('denied by Ada: reviewed: no');
  await expect(toolCard(viewer, 'run_command')).toContainText('Denied by Ada: reviewed: no');
  await expectFinalText(page, 'Understood, I did not run it.');

  await page.getByRole('link', { name: 'Audit', exact: true }).click();
  await expect(page.getByRole('row').filter({ hasText: 'run_command' })).toContainText('Ada');
});

test('after Revoke the reviewer page stops updating and a reload is 404; an expired link is 404', async ({ page, browser }) => {
  await login(page);
  await newSession(page, 'revoked session', 'faux:demo');
  const url = await createLink(page, 'viewer', 'short-lived');
  const reviewer = await openAsReviewer(browser, url, 'Rex');
  const closed = reviewer.waitForEvent('websocket').catch(() => null);
  void closed;

  await page.locator('#shares-panel').getByRole('listitem').filter({ hasText: 'short-lived' })
    .getByRole('button', { name: 'Revoke', exact: true }).click();
  await expect(page.locator('#shares-panel').getByRole('listitem').filter({ hasText: 'short-lived' })).toContainText('revoked');
  // Give the socket its second to close, measured on the page: nothing new arrives after it.
  await expect.poll(async () => {
    await send(page, 'Show me the workspace.');
    return true;
  }).toBe(true);
  await expect(approvalGroup(toolCard(page, 'run_command'), 'run_command')).toBeVisible();
  await expect(transcript(reviewer)).not.toContainText('Show me the workspace.', { timeout: 2_000 });
  const res = await reviewer.reload();
  expect(res!.status()).toBe(404);

  const expiring = await createLink(page, 'approver', 'expiring', '1s');
  const ctx = await browser.newContext();
  const fresh = await ctx.newPage();
  await expect.poll(async () => (await fresh.goto(expiring))!.status(), { timeout: 10_000 }).toBe(404);
});

test('tool output with HTML or script renders as text for the owner and the reviewer; no dialog fires', async ({ page, browser }) => {
  let dialogs = 0;
  page.on('dialog', (d) => { dialogs++; void d.dismiss(); });
  await login(page);
  await newSession(page, 'hostile output', 'faux:xss');
  const url = await createLink(page, 'viewer', 'xss viewer');
  const reviewer = await openAsReviewer(browser, url, 'Xena');
  reviewer.on('dialog', (d) => { dialogs++; void d.dismiss(); });
  await send(page, 'Fetch it.');
  await expectFinalText(page, 'Shown as text:');
  const payload = '<img src=x onerror=alert(1)><script>alert(2)</script>';
  for (const p of [page, reviewer]) {
    await expect(toolCard(p, 'fixture_html')).toContainText(payload);
    await expect(transcript(p).locator('img')).toHaveCount(0);
    await expect(transcript(p).locator('script')).toHaveCount(0);
  }
  await page.reload();
  await reviewer.reload();
  await expect(toolCard(page, 'fixture_html')).toContainText(payload);
  await expect(toolCard(reviewer, 'fixture_html')).toContainText(payload);
  expect(dialogs).toBe(0);
});
