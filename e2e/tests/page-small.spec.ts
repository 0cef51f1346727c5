import * as fs from 'node:fs';
import * as path from 'node:path';
import { test, expect } from '@playwright/test';
import { OWNER_TOKEN, approvalGroup, expectFinalText, login, loginAt, newSession, send, startOwnServer, toolCard, workspace } from './helpers';

// Issue 34's smaller page items, each checked where the page shows it.

test('session search puts the query in the address (/?q=), and a reload keeps it', async ({ page }) => {
  await login(page);
  const tag = `srch${Date.now()}`;
  await newSession(page, `${tag} alpha`, 'faux:markdown');
  await page.goto('/');
  const search = page.getByRole('searchbox', { name: 'Search sessions', exact: true });
  await search.fill(`${tag} alpha`);
  await expect(page).toHaveURL(new RegExp(`/\\?q=${tag}\\+alpha$`));
  await page.reload();
  await expect(page.getByRole('searchbox', { name: 'Search sessions', exact: true })).toHaveValue(`${tag} alpha`);
  await search.fill('');
  await expect(page).toHaveURL(/\/$/);
});

test('the model list is grouped by provider', async ({ page }) => {
  await login(page);
  const model = page.getByRole('combobox', { name: 'Model', exact: true });
  await expect(model.locator('optgroup[label="faux"] option[value="faux:demo"]')).toHaveCount(1);
  // Only faux models here (serve.sh unsets the providers' keys): the demo is the default.
  await expect(model).toHaveValue('faux:demo');
});

test('with a real provider configured, the model list starts at its model, grouped apart from the faux scripts', async ({ page }, info) => {
  const env = { ...process.env, OPENAI_BASE_URL: 'http://127.0.0.1:9/v1', OPENAI_MODEL: 'gpt-4o' };
  const server = await startOwnServer(`models-${info.workerIndex}`, 0, [], env);
  try {
    await loginAt(page, server.baseURL);
    const model = page.getByRole('combobox', { name: 'Model', exact: true });
    await expect(model).toHaveValue('openai:gpt-4o');
    await expect(model.locator('optgroup[label="openai"] option[value="openai:gpt-4o"]')).toHaveCount(1);
    await expect(model.locator('optgroup[label="faux"] option[value="faux:demo"]')).toHaveCount(1);
    // Real providers first.
    expect(await model.locator('optgroup').first().getAttribute('label')).toBe('openai');
  } finally {
    await server.kill();
  }
});

test('the role badge in the share list does not break mid-word, and the sidebar keeps the link whole at 900 px', async ({ page }) => {
  await page.setViewportSize({ width: 900, height: 800 });
  await login(page);
  await newSession(page, `share badge ${Date.now()}`, 'faux:markdown');
  const panel = page.locator('#shares-panel');
  await panel.getByRole('combobox', { name: 'Role', exact: true }).selectOption('approver');
  await panel.getByRole('textbox', { name: 'Label', exact: true }).fill('Reviewer link');
  await panel.getByRole('button', { name: 'Create share link', exact: true }).click();
  const item = panel.getByRole('listitem').filter({ hasText: 'Reviewer link' });
  const badge = item.locator('.share-head .state').first();
  await expect(badge).toHaveText('approver');
  expect(await badge.evaluate((el) => getComputedStyle(el).whiteSpace)).toBe('nowrap');
  const box = (await badge.boundingBox())!;
  expect(box.height, 'one line').toBeLessThan(24);
  // The link's URL is not cut off: it fits in the panel (wrapping is fine, clipping is not).
  const link = item.getByRole('link', { name: /\/r\// });
  const fits = await link.evaluate((el) => {
    const p = el.closest('#shares-panel')!.getBoundingClientRect();
    const r = el.getBoundingClientRect();
    return r.right <= p.right + 1 && el.scrollWidth <= el.clientWidth + 1;
  });
  expect(fits).toBe(true);
  // In a 900 px tall window with the sidebar beside the transcript, nothing in the sidebar is
  // cut off behind a scroll box of its own: the page scrolls to the link.
  for (const width of [1280, 960]) {
    await page.setViewportSize({ width, height: 900 });
    const side = page.locator('aside.session-side');
    expect(await side.evaluate((el) => el.scrollHeight - el.clientHeight), `sidebar at ${width} px`).toBeLessThanOrEqual(1);
    await link.scrollIntoViewIfNeeded();
    await expect(link).toBeInViewport({ ratio: 1 });
  }
});

test.describe('in Tokyo', () => {
  test.use({ timezoneId: 'Asia/Tokyo' });

test('a session grant shows the local time, not raw UTC', async ({ page }) => {
  await login(page);
  await newSession(page, `grant time ${Date.now()}`, 'faux:regrant');
  await send(page, 'First.');
  // faux:regrant's first call is fixture_counter, whose arguments carry no risk: "Approve for
  // session" grants the tool (SPEC §3), listed under Session grants.
  await approvalGroup(toolCard(page, 'fixture_counter'), 'fixture_counter').getByRole('button', { name: 'Approve for session', exact: true }).click();
  await expectFinalText(page, 'First turn done.');
  const grants = page.getByRole('region', { name: 'Session grants', exact: true });
  const time = grants.getByRole('listitem').first().locator('time[data-localtime]');
  await expect(time).toHaveCount(1);
  // In the browser's zone (Tokyo here), not UTC; the UTC value stays in the title.
  await expect(time).toHaveText(/^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d GMT\+9$/);
  await expect(time).toHaveAttribute('title', / UTC$/);
  await page.reload();
  await expect(page.getByRole('region', { name: 'Session grants', exact: true }).locator('time[data-localtime]').first()).toHaveText(/ GMT\+9$/);
});
});

test('after Log out the page says how to log in, and the token form logs in', async ({ page }) => {
  await login(page);
  await page.getByRole('button', { name: 'Log out', exact: true }).click();
  await expect(page.getByRole('heading', { name: 'You are logged out' })).toBeVisible();
  await page.getByLabel('Token', { exact: true }).fill(OWNER_TOKEN);
  await page.getByRole('button', { name: 'Log in', exact: true }).click();
  await expect(page.getByRole('button', { name: 'Create session', exact: true })).toBeVisible();
});

test('the session header keeps to two rows at 1280 px, and its links do not wrap inside at 390 px', async ({ page }) => {
  await page.setViewportSize({ width: 1280, height: 800 });
  await login(page);
  await newSession(page, `header ${Date.now()}`, 'faux:markdown');
  const header = page.locator('header.session-header');
  expect((await header.boundingBox())!.height, 'the header at 1280 px').toBeLessThan(120);
  await page.setViewportSize({ width: 390, height: 844 });
  for (const el of [page.getByRole('link', { name: 'Audit', exact: true }), page.locator('.delete-session > summary'),
    page.getByRole('link', { name: 'Rules for this session', exact: true })]) {
    expect((await el.boundingBox())!.height, 'one line').toBeLessThan(30);
  }
  expect(await page.evaluate(() => document.documentElement.scrollWidth - document.documentElement.clientWidth)).toBeLessThanOrEqual(0);
});

test('an approver link page has its own inbox link with the pending count', async ({ page, browser }) => {
  await login(page);
  await newSession(page, `link inbox ${Date.now()}`, 'faux:deny');
  const panel = page.locator('#shares-panel');
  await panel.getByRole('combobox', { name: 'Role', exact: true }).selectOption('approver');
  await panel.getByRole('textbox', { name: 'Label', exact: true }).fill('Inbox link');
  await panel.getByRole('textbox', { name: 'For', exact: true }).fill('carol');
  await panel.getByRole('button', { name: 'Create share link', exact: true }).click();
  const url = (await panel.getByRole('listitem').filter({ hasText: 'Inbox link' }).getByRole('link', { name: /\/r\// }).textContent())!.trim();
  await send(page, 'Make the marker.');
  await expect(approvalGroup(toolCard(page, 'run_command'), 'run_command')).toBeVisible();
  const carol = await (await browser.newContext()).newPage();
  await carol.goto(url);
  const inbox = carol.getByTestId('link-inbox');
  await expect(inbox).toHaveText(/Inbox\s*\(1\)/);
  await inbox.click();
  await expect(carol).toHaveURL(/\/r\/[^/]+\/inbox$/);
  await expect(carol.getByRole('group', { name: 'Approval required: run_command' })).toBeVisible();
  await carol.getByRole('link', { name: 'Session', exact: true }).click();
  await expect(carol).toHaveURL(/\/r\/[^/]+$/);
  // The brand leads to the link's session too, not to the owner's list (401 for a link holder).
  await carol.goto(new URL('inbox', url + '/').href);
  await carol.getByRole('link', { name: 'Countersign', exact: true }).click();
  await expect(carol).toHaveURL(/\/r\/[^/]+$/);
});

test('after an invalid edit the fields and the JSON agree, and the refusal shows once', async ({ page }) => {
  fs.writeFileSync(path.join(workspace, 'edit-target.txt'), 'alpha\nbeta\ngamma\n');
  await login(page);
  await newSession(page, `edit agree ${Date.now()}`, 'faux:edit');
  await send(page, 'Fix the second line.');
  const group = approvalGroup(toolCard(page, 'write_file'), 'write_file');
  await group.getByRole('button', { name: 'Edit', exact: true }).click();
  const json = group.getByRole('textbox', { name: 'Arguments', exact: true });
  const pathBox = group.getByRole('textbox', { name: 'Path', exact: true });
  const content = group.getByRole('textbox', { name: 'Content', exact: true });
  await expect(pathBox).toHaveValue('edit-target.txt');

  // JSON that does not parse: the fields cannot pretend otherwise.
  await json.fill('{"path": "other.txt", ');
  await expect(group.getByText('The JSON below does not parse')).toBeVisible();
  await expect(pathBox).not.toBeEditable();
  await expect(content).not.toBeEditable();
  // JSON without content: Content shows empty, Path the new path.
  await json.fill('{"path": "other.txt"}');
  await expect(group.getByText('The JSON below does not parse')).toHaveCount(0);
  await expect(pathBox).toHaveValue('other.txt');
  await expect(content).toHaveValue('');
  await expect(pathBox).toBeEditable();

  // Approve is refused; the message shows once in the prompt.
  await group.getByRole('button', { name: 'Approve', exact: true }).click();
  await expect(group.getByRole('alert')).toContainText("missing property 'content'");
  await expect(group.getByText(/missing property 'content'/)).toHaveCount(1);
  // Typing again: the stale refusal goes; the preview says what Approve would refuse now.
  await json.fill('{"path": "other.txt", "content": 5}');
  await expect(group.getByRole('alert')).toHaveCount(0);
  await expect(group.locator('.preview-problem')).toHaveCount(1);
});
