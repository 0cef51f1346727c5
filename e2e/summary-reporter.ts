import type { FullConfig, FullResult, Reporter, Suite } from '@playwright/test/reporter';

// Prints one closing line "e2e: N passed, N failed, N skipped" after the list reporter's summary,
// in the plain form CI reads. Flaky tests (passed on retry) count as passed; tests that never ran
// because the run itself failed (e.g. the web server did not start) count as failed.
export default class SummaryReporter implements Reporter {
  private suite: Suite | undefined;

  printsToStdio(): boolean {
    return true;
  }

  onBegin(_config: FullConfig, suite: Suite): void {
    this.suite = suite;
  }

  onEnd(result: FullResult): void {
    if (process.argv.includes('--list')) return;
    let passed = 0;
    let failed = 0;
    let skipped = 0;
    for (const test of this.suite?.allTests() ?? []) {
      if (test.results.length === 0) {
        if (result.status !== 'passed') failed++;
        else skipped++;
        continue;
      }
      switch (test.outcome()) {
        case 'expected':
        case 'flaky':
          passed++;
          break;
        case 'unexpected':
          failed++;
          break;
        case 'skipped':
          skipped++;
          break;
      }
    }
    process.stdout.write(`\ne2e: ${passed} passed, ${failed} failed, ${skipped} skipped\n`);
  }
}
