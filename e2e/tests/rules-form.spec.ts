import * as fs from 'node:fs';
import * as path from 'node:path';
import { test, expect, type Page } from '@playwright/test';
import { approvalGroup, login, newSession, send, toolCard } from './helpers';

// Issue 34, acceptance 5 (the page's part): the Rules form starts at the narrowest scope (the
// session it was opened from, else the workspace; never every session); saving `*` or an allow of
// a whole tool asks first and names what it would release; a `when` rule is saved from the form,
// and a `when` the compiler refuses shows its message.

const docs = path.resolve(__dirname, '../../docs');

// A session parked on a run_command prompt. Its command writes a marker of its own
// (faux:release): the test releases it, and the shared workspace's denied-marker.txt, which
// other specs check was never written, must stay unwritten.
async function pendingSession(page: Page, title: string): Promise<string> {
  const id = await newSession(page, title, 'faux:release');
  await send(page, 'Make the marker.');
  await expect(approvalGroup(toolCard(page, 'run_command'), 'run_command')).toBeVisible();
  return id;
}

const scope = (page: Page) => page.getByRole('combobox', { name: 'Scope', exact: true });

test('the Rules form starts at the session it was opened from, else the workspace, never every session', async ({ page }) => {
  await login(page);
  const id = await newSession(page, `rules scope ${Date.now()}`, 'faux:deny');
  await page.getByRole('link', { name: 'Rules for this session', exact: true }).click();
  await expect(page).toHaveURL(new RegExp(`/rules\\?session=${id}$`));
  await expect(scope(page)).toHaveValue(`session:${id}`);
  await page.goto('/rules');
  await expect(scope(page)).toHaveValue(/^workspace:/);
  await expect(scope(page)).not.toHaveValue('server');
  // Placeholders read as examples, not as values.
  await expect(page.getByRole('textbox', { name: 'Rule', exact: true })).toHaveAttribute('placeholder', /^e\.g\. /);
  await expect(page.getByRole('textbox', { name: 'Rule', exact: true })).toHaveValue('');
});

test('saving * or a whole-tool allow asks first, naming the pending calls and sessions it releases', async ({ page }) => {
  await login(page);
  const title = `release me ${Date.now()}`;
  const id = await pendingSession(page, title);
  await page.goto(`/rules?session=${id}`);
  const rule = page.getByRole('textbox', { name: 'Rule', exact: true });

  // `*` for every session: asked, and nothing is saved or released until "Save anyway".
  await rule.fill('*');
  await scope(page).selectOption('server');
  await page.getByRole('button', { name: 'Add rule', exact: true }).click();
  const confirm = page.getByTestId('rule-confirm');
  await expect(confirm).toContainText('allows every call of every tool without a prompt');
  await expect(confirm).toContainText(/Saving it lets up to \d+ pending calls? run now/);
  await expect(confirm).toContainText(`“${title}”`);
  await expect(rule).toHaveValue('*');
  await expect(page.locator('code.rule-text', { hasText: /^\*$/ })).toHaveCount(0);
  if (process.env.DOCS_SHOTS) {
    for (const w of [1280, 390]) {
      await page.setViewportSize({ width: w, height: 900 });
      await confirm.scrollIntoViewIfNeeded();
      fs.mkdirSync(docs, { recursive: true });
      await page.screenshot({ path: path.join(docs, `rules-confirm-${w}.png`) });
    }
  }

  // run_command for this session only: it names this one call; saving it releases it.
  await rule.fill('run_command');
  await scope(page).selectOption(`session:${id}`);
  await page.getByRole('button', { name: 'Save anyway', exact: true }).click();
  await expect(confirm).toContainText('run_command (session) allows every call of run_command without a prompt. Saving it lets up to 1 pending call run now');
  await page.getByRole('button', { name: 'Save anyway', exact: true }).click();
  await expect(page).toHaveURL(/\/rules$/);
  await expect(page.locator('tr', { hasText: title }).locator('code.rule-text')).toHaveText('run_command');
  await page.goto(`/sessions/${id}`);
  await expect(toolCard(page, 'run_command')).toContainText('approved automatically');
});

test('a when rule is saved from the form; a when the compiler refuses shows its message', async ({ page }) => {
  await login(page);
  const id = await newSession(page, `when rule ${Date.now()}`, 'faux:deny');
  await page.goto(`/rules?session=${id}`);
  await page.getByRole('textbox', { name: 'Rule', exact: true }).fill('run_command');
  const when = page.getByRole('textbox', { name: 'When', exact: true });
  await when.fill('args.command.startsWith(');
  await page.getByRole('button', { name: 'Add rule', exact: true }).click();
  await expect(page.getByRole('alert')).toContainText(/Syntax error|syntax error|mismatched input|unexpected/i);
  await expect(when).toHaveValue('args.command.startsWith(');
  await when.fill('args.command.startsWith("git status")');
  await page.getByRole('button', { name: 'Add rule', exact: true }).click();
  await expect(page).toHaveURL(/\/rules$/);
  await expect(page.locator('code.rule-text', { hasText: 'when args.command.startsWith("git status")' })).toBeVisible();
});
