import { test, expect, type Page } from '@playwright/test';
import { OWNER_TOKEN, approvalGroup, expectFinalText, login, newSession, send } from './helpers';

// Issue 16, item 6: an audit a reviewer can read — what became of each gated call, times in the
// reader's time zone (UTC in the tooltip), filters by decision and tool whose URL can be shared.

// Tokyo is UTC+9 all year (no daylight saving), so the local hour is the UTC hour plus nine.
test.use({ timezoneId: 'Asia/Tokyo', locale: 'en-US' });

/** The audit table's rows (without the header row). */
function rows(page: Page) {
  return page.getByRole('table').getByRole('row').filter({ has: page.getByRole('cell') });
}

/** The text of a row's cell under the column header `column`, for the call `callId`. */
async function cellOf(page: Page, callId: string, column: string): Promise<string> {
  const headers = await page.getByRole('table').getByRole('columnheader').allInnerTexts();
  const i = headers.findIndex((h) => h.trim() === column);
  expect(i, `column ${column}`).toBeGreaterThanOrEqual(0);
  const row = rows(page).filter({ has: page.getByRole('cell', { name: callId, exact: true }) });
  await expect(row).toHaveCount(1);
  return (await row.getByRole('cell').nth(i).innerText()).trim();
}

test('item 6, audit a reviewer can read: outcome per call, local times with UTC in the tooltip, filters by decision and tool', async ({ page, context }) => {
  await login(page);
  const id = await newSession(page, 'audit outcomes', 'faux:audit-outcomes');
  await send(page, 'Make four calls.');
  const prompt = (callId: string) => approvalGroup(page.locator(`[data-tool-call-id="${callId}"]`), 'run_command');
  await prompt('audit-ok').getByRole('button', { name: 'Approve', exact: true }).click();
  await prompt('audit-denied').getByRole('textbox', { name: 'Reason', exact: true }).fill('not this one');
  await prompt('audit-denied').getByRole('button', { name: 'Deny', exact: true }).click();
  await expectFinalText(page, 'Audit calls done.');

  await page.getByRole('link', { name: 'Audit', exact: true }).click();
  await expect(page).toHaveURL(new RegExp(`/sessions/${id}/audit$`));
  await expect(rows(page)).toHaveCount(4);

  // Outcome: what the stored result says.
  expect(await cellOf(page, 'audit-ok', 'Outcome')).toBe('ok');
  expect(await cellOf(page, 'audit-error', 'Outcome')).toBe('error');
  expect(await cellOf(page, 'audit-denied', 'Outcome')).toBe('not run');
  expect(await cellOf(page, 'audit-violation', 'Outcome')).toBe('violation');

  // Times: the text in Tokyo time, the tooltip in UTC, nine hours apart.
  const time = rows(page).filter({ has: page.getByRole('cell', { name: 'audit-ok', exact: true }) }).locator('time').first();
  const title = await time.getAttribute('title');
  expect(title).toMatch(/^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC$/);
  await expect(time).not.toHaveText(/UTC$/);
  const text = await time.innerText();
  expect(text).toMatch(/^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d (GMT\+9|JST)$/);
  const utcHour = Number(title!.slice(11, 13));
  const localHour = Number(text.slice(11, 13));
  expect(localHour).toBe((utcHour + 9) % 24);
  expect(text.slice(14, 19)).toBe(title!.slice(14, 19)); // same minutes and seconds
  const datetime = await time.getAttribute('datetime');
  expect(new Date(datetime!).toISOString().slice(0, 19).replace('T', ' ')).toBe(title!.slice(0, 19));

  // Filter by tool: the form's GET query narrows the rows, server side.
  const filters = page.getByRole('search', { name: 'Filter the audit' });
  await filters.getByRole('combobox', { name: 'Tool', exact: true }).selectOption('fixture_violation');
  await filters.getByRole('button', { name: 'Filter', exact: true }).click();
  await expect(page).toHaveURL(/[?&]tool=fixture_violation(&|$)/);
  await expect(rows(page)).toHaveCount(1);
  await expect(page.getByRole('status').filter({ hasText: 'Showing 1 of 4 gated calls.' })).toBeVisible();
  expect(await cellOf(page, 'audit-violation', 'Outcome')).toBe('violation');

  // Filter by decision (and back to every tool): the denied call only.
  await filters.getByRole('combobox', { name: 'Tool', exact: true }).selectOption('');
  await filters.getByRole('combobox', { name: 'Decision', exact: true }).selectOption('denied');
  await filters.getByRole('button', { name: 'Filter', exact: true }).click();
  await expect(page).toHaveURL(/[?&]decision=denied(&|$)/);
  await expect(rows(page)).toHaveCount(1);
  expect(await cellOf(page, 'audit-denied', 'Decision')).toBe('denied');

  // Decided by: automatic (the policy let read_file and fixture_violation through) or a person.
  await filters.getByRole('combobox', { name: 'Decision', exact: true }).selectOption('');
  await filters.getByRole('combobox', { name: 'Decided by', exact: true }).selectOption('automatic');
  await filters.getByRole('button', { name: 'Filter', exact: true }).click();
  await expect(rows(page)).toHaveCount(2);
  await expect(rows(page).filter({ hasText: 'fixture_violation' })).toHaveCount(1);
  await expect(rows(page).filter({ hasText: 'read_file' })).toHaveCount(1);

  // The filtered URL is shareable: another page opening it sees the same rows and choices.
  const shared = await context.newPage();
  await shared.goto(`/sessions/${id}/audit?by=person&tool=run_command`);
  await expect(rows(shared)).toHaveCount(2);
  await expect(shared.getByRole('combobox', { name: 'Decided by', exact: true })).toHaveValue('person');
  await expect(shared.getByRole('combobox', { name: 'Tool', exact: true })).toHaveValue('run_command');
  expect(await cellOf(shared, 'audit-ok', 'Outcome')).toBe('ok');
  expect(await cellOf(shared, 'audit-denied', 'Outcome')).toBe('not run');
  await shared.getByRole('link', { name: 'Clear filters', exact: true }).click();
  await expect(rows(shared)).toHaveCount(4);
});

// Issue 19: the nested calls of one call that rules allowed the same way are audited as one row
// that says how many calls it stands for ("×300", read "300 calls"), with the first call and the
// first and last decision times; the JSON API's record carries count and lastAt.
test('issue 19, grouped audit: 300 allowed nested list_files calls are one row ×300, in the page and the API', async ({ page }) => {
  await login(page);
  const id = await newSession(page, 'grouped audit', 'faux:grouped-audit');
  const box = page.getByRole('group', { name: 'Tools', exact: true }).getByRole('checkbox', { name: 'codemode', exact: true });
  await box.check();
  await expect(box).toBeChecked();
  await send(page, 'List the files many times.');
  await expectFinalText(page, 'The script said: listed 300 times');

  await page.getByRole('link', { name: 'Audit', exact: true }).click();
  await expect(page).toHaveURL(new RegExp(`/sessions/${id}/audit$`));
  // codemode's own decision and one row for its 300 list_files calls.
  await expect(rows(page)).toHaveCount(2);
  await expect(page.getByRole('status').filter({ hasText: '301 gated calls.' })).toBeVisible();
  const grouped = rows(page).filter({ has: page.getByRole('cell', { name: 'list_files 300 calls', exact: true }) });
  await expect(grouped).toHaveCount(1);
  await expect(grouped.getByText('×300', { exact: true })).toBeVisible();
  await expect(grouped).toContainText('gr1/1');
  await expect(grouped).toContainText('first of 300');
  await expect(grouped.locator('td.col-decided time')).toHaveCount(2);
  await expect(grouped.locator('td.col-outcome')).toHaveText('ok');

  const res = await page.request.get(`/api/sessions/${id}/approvals`, { headers: { Authorization: `Bearer ${OWNER_TOKEN}` } });
  const approvals = (await res.json()).approvals as { toolName: string; toolCallId: string; count?: number; decidedAt: string; lastAt?: string }[];
  const calls = approvals.reduce((n, a) => n + (a.count ?? 1), 0);
  expect(calls, 'every gated call is accounted for').toBe(301);
  const record = approvals.find((a) => a.toolName === 'list_files');
  expect(record?.count).toBe(300);
  expect(record?.toolCallId).toBe('gr1/1');
  expect(Date.parse(record!.lastAt!)).toBeGreaterThanOrEqual(Date.parse(record!.decidedAt));
});
