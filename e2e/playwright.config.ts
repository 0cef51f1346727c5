import { defineConfig } from '@playwright/test';

// Browser tests for Countersign. They drive Debian's Chromium (/usr/bin/chromium); Playwright never
// downloads a browser here. `make e2e` builds bin/countersign first; serve.sh starts it on a fresh
// database and workspace (e2e/.tmp) with the faux scripts of e2e/scripts.
// E2E_PORT moves the suite's server (and the ports tests start their own servers on, E2E_PORT+220
// and up), so two checkouts can run the suite side by side.
const port = Number(process.env.E2E_PORT || 18080);
process.env.E2E_PORT = String(port);
const baseURL = `http://127.0.0.1:${port}`;

export default defineConfig({
  testDir: 'tests',
  // Every test makes its own session, so the tests of one file may run side by side.
  fullyParallel: true,
  forbidOnly: !!process.env.CI,
  retries: process.env.CI ? 1 : 0,
  workers: 2,
  timeout: 60_000,
  expect: { timeout: 10_000 },
  reporter: [
    ['list'],
    ['html', { open: 'never' }],
    // Last, so CI output ends with a plain "e2e: N passed, N failed, N skipped" line.
    ['./summary-reporter.ts'],
  ],
  use: {
    baseURL,
    trace: 'retain-on-failure',
    screenshot: 'only-on-failure',
  },
  projects: [
    {
      name: 'chromium',
      use: {
        browserName: 'chromium',
        launchOptions: {
          executablePath: '/usr/bin/chromium',
          args: [
            '--headless',
            '--no-sandbox',
            '--disable-gpu',
            '--disable-quic',
            '--no-first-run',
            '--disable-background-networking',
            '--disable-component-update',
            '--disable-sync',
          ],
        },
      },
    },
  ],
  webServer: {
    command: './serve.sh',
    url: `${baseURL}/healthz`,
    reuseExistingServer: false,
    timeout: 180_000,
    stdout: 'pipe',
    stderr: 'pipe',
  },
});
