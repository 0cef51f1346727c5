import { test, expect, type Browser, type Page } from '@playwright/test';
import { approvalGroup, expectFinalText, login, newSession, send, toolCard, transcript } from './helpers';

// Issue 15, items 1 and 10 (SPEC §7): an approver link decides the approval in front of it, once,
// unless it was made with the rights to edit arguments or approve for the session; decisions name
// the link they were made through; the owner sees and revokes session grants.

interface Rights { canEdit?: boolean; canRemember?: boolean }

async function createApproverLink(owner: Page, label: string, rights: Rights = {}): Promise<string> {
  const panel = owner.locator('#shares-panel');
  await panel.getByRole('combobox', { name: 'Role', exact: true }).selectOption('approver');
  await panel.getByRole('textbox', { name: 'Label', exact: true }).fill(label);
  await panel.getByRole('checkbox', { name: 'Can edit arguments', exact: true }).setChecked(!!rights.canEdit);
  await panel.getByRole('checkbox', { name: 'Can remember', exact: true }).setChecked(!!rights.canRemember);
  await panel.getByRole('button', { name: 'Create share link', exact: true }).click();
  const item = panel.getByRole('listitem').filter({ hasText: label });
  const link = item.getByRole('link', { name: /\/r\// });
  await expect(link).toBeVisible();
  return (await link.textContent())!.trim();
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

test('an approver link without rights has no Edit or Approve for session and is refused 403; a canEdit link edits, audited as the reviewer and the link', async ({ page, browser }) => {
  await login(page);
  await newSession(page, 'link rights', 'faux:rights');
  const plainURL = await createApproverLink(page, 'plain approver');
  const editURL = await createApproverLink(page, 'Design review', { canEdit: true });
  await expect(page.locator('#shares-panel').getByRole('listitem').filter({ hasText: 'Design review' }))
    .toContainText('can edit arguments');

  const plain = await openAsReviewer(browser, plainURL, 'Rita');
  const editor = await openAsReviewer(browser, editURL, 'Ada');
  await send(page, 'Run it.');

  const plainGroup = approvalGroup(toolCard(plain, 'run_command'), 'run_command');
  await expect(plainGroup).toBeVisible();
  await expect(plainGroup.getByRole('button', { name: 'Approve', exact: true })).toBeVisible();
  await expect(plainGroup.getByRole('button', { name: 'Deny', exact: true })).toBeVisible();
  await expect(plainGroup.getByRole('button', { name: 'Edit', exact: true })).toHaveCount(0);
  await expect(plainGroup.getByRole('button', { name: 'Approve for session', exact: true })).toHaveCount(0);
  await expect(plainGroup.getByRole('textbox', { name: 'Arguments', exact: true })).toHaveCount(0);

  // The same requests, made directly with the reviewer's own cookie, are refused.
  const approvalId = (await plainGroup.getAttribute('data-approval-id'))!;
  const decisionURL = `${plainURL}/approvals/${approvalId}/decision`;
  const edited = await plain.request.post(decisionURL, {
    form: { decision: 'approve', arguments: '{"command": "echo pwned > pwned.txt"}' },
  });
  // Refused by the link's rights (not by the cross-origin check, which also answers 403).
  expect(edited.status()).toBe(403);
  expect(await edited.text()).toContain('This link may not edit arguments');
  const remembered = await plain.request.post(decisionURL, { form: { decision: 'approve_session' } });
  expect(remembered.status()).toBe(403);
  expect(await remembered.text()).toContain('This link may not approve for the session');
  const owned = await page.request.get(`/api/sessions/${new URL(page.url()).pathname.split('/').pop()}/approvals?status=pending`);
  expect(owned.status()).toBe(200);
  const pending = (await owned.json()).approvals as { id: string; status: string }[];
  expect(pending.map((a) => a.id)).toEqual([approvalId]);
  await expect(approvalGroup(toolCard(page, 'run_command'), 'run_command')).toBeVisible();

  // The canEdit link shows Edit (but not Approve for session); its edit runs.
  const group = approvalGroup(toolCard(editor, 'run_command'), 'run_command');
  await expect(group.getByRole('button', { name: 'Approve for session', exact: true })).toHaveCount(0);
  await group.getByRole('button', { name: 'Edit', exact: true }).click();
  await group.getByRole('textbox', { name: 'Arguments', exact: true }).fill('{"command": "echo edited-by-ada"}');
  await group.getByRole('button', { name: 'Approve', exact: true }).click();
  await expectFinalText(page, 'Ran: edited-by-ada');
  await expect(toolCard(page, 'run_command')).toContainText('approved by Ada with edited arguments');
  await expect(plainGroup).toBeHidden();

  await page.getByRole('link', { name: 'Audit', exact: true }).click();
  const row = page.getByRole('row').filter({ hasText: 'run_command' });
  await expect(row).toContainText('Ada');
  await expect(row).toContainText(/\(link: Design review · id [a-z0-9]+\)/);
  await expect(row).toContainText('as asked');
  await expect(row).toContainText('echo as-asked');
  await expect(row).toContainText('as approved');
  await expect(row).toContainText('echo edited-by-ada');
});

test('a grant made through a canRemember link is listed for the owner, who revokes it; the next call asks again', async ({ page, browser }) => {
  await login(page);
  await newSession(page, 'grant and revoke', 'faux:regrant');
  const url = await createApproverLink(page, 'Ops', { canRemember: true });
  const reviewer = await openAsReviewer(browser, url, 'Gus');
  const grants = page.getByRole('region', { name: 'Session grants', exact: true });
  await expect(grants).toContainText('No session grants');

  await send(page, 'First.');
  // A tool whose arguments carry no risk: "Approve for session" grants the tool (SPEC §3).
  const group = approvalGroup(toolCard(reviewer, 'fixture_counter'), 'fixture_counter');
  await expect(group.getByRole('button', { name: 'Edit', exact: true })).toHaveCount(0);
  await group.getByRole('button', { name: 'Approve for session', exact: true }).click();
  await expectFinalText(page, 'First turn done.');

  // Live on the owner's page: the tool, who granted it, through which link.
  const item = grants.getByRole('listitem').filter({ hasText: 'fixture_counter' });
  await expect(item).toContainText('granted by Gus');
  await expect(item).toContainText(/\(link: Ops · id [a-z0-9]+\)/);
  await expect(reviewer.getByRole('region', { name: 'Session grants' })).toHaveCount(0);
  await item.getByRole('button', { name: 'Revoke', exact: true }).click();
  await expect(grants).toContainText('No session grants');

  await send(page, 'Second.');
  const second = page.locator('[data-tool-call-id="q2"]');
  await expect(approvalGroup(second, 'fixture_counter')).toBeVisible();
  await approvalGroup(second, 'fixture_counter').getByRole('button', { name: 'Deny', exact: true }).click();
  await expectFinalText(page, 'Second turn done.');
});
