import * as fs from 'node:fs';
import * as path from 'node:path';
import { test, expect } from '@playwright/test';
import { approvalGroup, login, newSession, send, toolCard, workspace } from './helpers';

// The README's screenshots (docs/): the session page with a pending write_file prompt and the
// session list with a session waiting for approval, at 1280×800 and 390×844. Run on purpose with
// `DOCS_SHOTS=1 make e2e E2E_ARGS=tests/docs-screenshots.spec.ts`; skipped in the suite.
test.skip(!process.env.DOCS_SHOTS, 'set DOCS_SHOTS=1 to refresh docs/ screenshots');

const docs = path.resolve(__dirname, '../../docs');

for (const [w, h] of [[1280, 800], [390, 844]]) {
  test(`docs screenshots at ${w}×${h}`, async ({ page }) => {
    await page.setViewportSize({ width: w, height: h });
    fs.writeFileSync(path.join(workspace, 'edit-target.txt'), 'alpha\nbeta\ngamma\n');
    await login(page);
    await newSession(page, 'An idle session', 'faux:markdown');
    const id = await newSession(page, `Update edit-target.txt (${w} px)`, 'faux:edit');
    await send(page, 'Please capitalise the second line.');
    const group = approvalGroup(toolCard(page, 'write_file'), 'write_file');
    await expect(group).toBeVisible();
    await group.scrollIntoViewIfNeeded();
    fs.mkdirSync(docs, { recursive: true });
    await page.screenshot({ path: path.join(docs, `session-prompt-${w}.png`) });
    await page.goto('/');
    await expect(page.getByText('waiting for approval').first()).toBeVisible();
    await page.screenshot({ path: path.join(docs, `sessions-waiting-${w}.png`) });
    // Leave one waiting session for the next width's list.
    await page.goto(`/sessions/${id}`);
    await page.getByRole('button', { name: 'Stop', exact: true }).click();
    await expect(page.getByRole('button', { name: 'Stop', exact: true })).toBeHidden();
  });
}
