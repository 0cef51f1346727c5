#!/usr/bin/env bash
# Starts the Countersign server for the Playwright suite (playwright.config.ts -> webServer).
# Fresh state on every run: a new SQLite file and a new workspace under e2e/.tmp.
# The binary is built beforehand by `make build` (`make e2e` depends on it).
set -euo pipefail

cd "$(dirname "$0")"

bin=../bin/countersign
if [[ ! -x "$bin" ]]; then
  echo "serve.sh: $bin not found; run 'make build' (or 'make e2e') from the repository root" >&2
  exit 1
fi

rm -rf .tmp
mkdir -p .tmp/db .tmp/workspace

cat > .tmp/workspace/README.md <<'README'
# Countersign e2e workspace

This folder is created fresh by e2e/serve.sh for every browser test run.
The tools of the agent read, write and run commands here.
README

# Keep the run deterministic: no real model providers, no MCP servers from the caller's environment.
unset OPENAI_API_KEY OPENAI_BASE_URL ANTHROPIC_API_KEY COUNTERSIGN_MCP_CONFIG

exec "$bin" \
  -addr 127.0.0.1:${E2E_PORT:-18080} \
  -db .tmp/db/e2e.db \
  -token e2e-owner-token-0123456789abcdefghij \
  -workspace "$PWD/.tmp/workspace" \
  -scripts "$PWD/scripts" \
  -approval-timeout 15m \
  -fixture-tools
