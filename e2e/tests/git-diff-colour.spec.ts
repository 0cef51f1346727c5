import { execFileSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { test, expect } from '@playwright/test';
import { approvalGroup, expectFinalText, loginAt, newSession, send, startOwnServer, toolCard } from './helpers';

// Issue 34: the nested git_diff's diff is coloured like write_file's (added and removed lines).

test('a nested git_diff shows its diff coloured, live and after a reload', async ({ page }, info) => {
  const server = await startOwnServer(`gitdiff-${info.workerIndex}`, 0);
  try {
    const ws = server.workspace;
    const git = (...args: string[]) => execFileSync('git', ['-c', 'user.name=e2e', '-c', 'user.email=e2e@example.com', ...args], { cwd: ws });
    if (!fs.existsSync(path.join(ws, '.git'))) {
      git('init', '-q');
      fs.writeFileSync(path.join(ws, 'notes.txt'), 'alpha\nbeta\n');
      git('add', 'notes.txt');
      git('commit', '-q', '-m', 'start');
    }
    fs.writeFileSync(path.join(ws, 'notes.txt'), 'alpha\nBETA changed\n');
    await loginAt(page, server.baseURL);
    await newSession(page, 'git diff colour', 'faux:review-diff');
    await send(page, 'Review it.');
    const card = toolCard(page, 'review_diff');
    for (const name of ['run_checks', 'failing_tests']) {
      const group = approvalGroup(card, name);
      await group.getByRole('button', { name: 'Deny', exact: true }).click();
    }
    await expectFinalText(page, 'Reviewed.');
    const check = async () => {
      const diff = toolCard(page, 'review_diff').locator('[data-tool-call-id="rv/1"]');
      await expect(diff.locator('.diff-text .diff-add', { hasText: '+BETA changed' }).first()).toBeAttached();
      await expect(diff.locator('.diff-text .diff-del', { hasText: '-beta' }).first()).toBeAttached();
      const bg = await diff.locator('.diff-text .diff-add').first().evaluate((el) => getComputedStyle(el).backgroundColor);
      expect(bg).toBe('rgb(230, 255, 236)'); // write_file's .diff-add
    };
    await check();
    await page.reload();
    await check();
  } finally {
    await server.kill();
  }
});
