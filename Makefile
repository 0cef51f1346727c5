# Countersign build, test and maintenance targets. Run from the repository root.
#
#   make run RUN_ARGS='-addr 127.0.0.1:8080'   build and start the server (prints the login URL)
#   make test                                  Go tests (race detector), then the browser tests
#   make e2e E2E_ARGS='-g deny'                 only the browser tests (Playwright, /usr/bin/chromium)
#   make vendor                                 refresh web/static/vendor from e2e/node_modules
#   make fuzz FUZZTIME=30s                      every fuzz target, one after another
#
# Front-end files in web/static/vendor are committed. To update them, change the pinned versions
# of htmx.org / htmx-ext-ws in e2e/package.json, run `npm install` in e2e/ (updates the lock file),
# then `make vendor` and commit the result.

GO       ?= go
BIN      := bin/countersign
RUN_ARGS ?=
# The policy file `make run` starts with (SPEC §14): a few harmless allow rules and one deny, so
# the Rules page has something to show. RUN_POLICY= starts without one.
RUN_POLICY ?= demo/policy.json
E2E_ARGS ?=
NPM_CI   := npm ci --no-audit --no-fund

# Playwright must never download a browser: the tests use Debian's /usr/bin/chromium.
export PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD := 1

.PHONY: all generate build run fmt lint check-generated test test-go conformance e2e e2e-deps mcp-testserver fakemodel fuzz bench bench-peers vendor clean

all: build

generate:
	$(GO) tool templ generate

# The server is built without cgo (a static binary: no libc or dynamic loader mapped, Go's own
# DNS resolver), with file paths trimmed and without the symbol table and DWARF (-s implies -w;
# panics and profiles still name functions and lines, from the runtime's own tables). Together
# about 2 MB less resident memory and a binary a third smaller. bench/cmd/load builds its rss
# case's binary with the same flags: keep them in step.
BUILD_ENV   := CGO_ENABLED=0
BUILD_FLAGS := -trimpath -ldflags=-s

# bin/countersign-hook is `countersign hook` on its own (issue 30): agents run it for every tool
# call, so it links the standard library's HTTP client and nothing of the server.
build: generate
	$(BUILD_ENV) $(GO) build $(BUILD_FLAGS) -o $(BIN) ./cmd/web
	$(BUILD_ENV) $(GO) build $(BUILD_FLAGS) -o bin/countersign-hook ./cmd/countersign-hook

run: build
	./$(BIN) $(if $(RUN_POLICY),-policy $(RUN_POLICY)) $(RUN_ARGS)

# gofmt on the Go files git knows about (tracked, plus new files that are not ignored).
fmt:
	git ls-files --cached --others --exclude-standard -- '*.go' \
		| while IFS= read -r f; do [ -f "$$f" ] && printf '%s\n' "$$f"; done \
		| xargs -r gofmt -l -w
	$(GO) tool templ fmt web/templates

lint:
	$(GO) vet ./...
	@if command -v staticcheck >/dev/null 2>&1; then \
		echo staticcheck ./...; staticcheck ./...; \
	else \
		echo "staticcheck not installed: skipped (go vet ran)"; \
	fi

# Fails when the committed *_templ.go files differ from what `templ generate` produces.
check-generated: generate
	@changes=$$(git status --porcelain -- '*_templ.go'); \
	if [ -n "$$changes" ]; then \
		echo "generated templ files are stale or not committed (run 'make generate' and commit):"; \
		echo "$$changes"; \
		exit 1; \
	fi; \
	echo "generated templ files are up to date"

# Go tests first, then the browser tests (sequential even under make -j).
# Everything, against a throwaway PostgreSQL cluster when Debian's postgresql is installed
# (scripts/with-postgres.sh sets COUNTERSIGN_TEST_POSTGRES; without it the PostgreSQL cases skip,
# except under CI=true, where they fail).
test:
	scripts/with-postgres.sh $(MAKE) --no-print-directory test-go conformance e2e

# The store conformance suite's verdict per backend (issue 21: the run's output shows both): the
# suite already ran in test-go; this names each backend's result, sqlite and postgres.
conformance:
	@out=$$($(GO) test -count=1 -run '^TestConformance$$' -v ./internal/store/ ./internal/store/pg/ 2>&1); rc=$$?; \
		echo "$$out" | grep -E -- '^    --- (PASS|FAIL|SKIP): TestConformance/(sqlite|postgres) ' | sed 's/^    /conformance: /'; \
		if [ $$rc -ne 0 ]; then echo "$$out" | tail -50; exit $$rc; fi

test-go:
	$(GO) test -race -count=1 ./...

e2e-deps:
	@if [ ! -d e2e/node_modules ]; then cd e2e && $(NPM_CI); fi
	@if [ ! -d examples/vercel-ai-sdk/node_modules ]; then cd examples/vercel-ai-sdk && $(NPM_CI); fi
	@if [ ! -d examples/openai-agents/node_modules ]; then cd examples/openai-agents && $(NPM_CI); fi
	@if [ ! -x e2e/agents/node_modules/.bin/claude ] || [ ! -x e2e/agents/node_modules/.bin/codex ]; then cd e2e/agents && $(NPM_CI); fi

# The real agents the browser suite drives (claude-code.spec.ts, codex.spec.ts; SPEC §18) are a
# package of their own, e2e/agents (about 760 MB installed, 330 MB to download: Claude Code's and
# Codex's native binaries), so `npm ci` in e2e/ for Playwright alone stays small; `make e2e`
# installs both once. bin/fakemodel is the fake Anthropic and Responses API they talk to, and
# bin/countersign-hook (built by `build`) is Codex's command hook.
fakemodel:
	$(BUILD_ENV) $(GO) build -o bin/fakemodel ./internal/fakemodels/cmd/fakemodel

# The MCP stdio server of internal/mcp's tests, which browser tests configure as an untrusted
# MCP server (-mcp-config) to see its prompts (issue 16).
mcp-testserver:
	$(BUILD_ENV) $(GO) build -o bin/mcp-stdioserver ./internal/mcp/testdata/stdioserver

e2e: build e2e-deps mcp-testserver fakemodel
	cd e2e && npx playwright test $(E2E_ARGS)

# Fuzz targets for the inputs strangers control (issue 15), as ./pkg/path:FuzzName. `make test`
# runs each one's seed corpus (testdata/fuzz/<FuzzName>); `make fuzz` fuzzes each for FUZZTIME,
# one after another (FUZZ_FLAGS=-parallel=1 to spare a shared machine). A crasher is written to
# the package's testdata/fuzz/<FuzzName>/: fix it and commit it with the fix. The first run of
# a package builds it with coverage instrumentation, which takes minutes for the larger ones.
FUZZTIME     ?= 30s
FUZZ_FLAGS   ?=
FUZZ_TARGETS := \
	./internal/models:FuzzParseScript \
	./internal/models:FuzzLastResult \
	./internal/mcp:FuzzToolResult \
	./internal/tool:FuzzCompileSchema \
	./internal/tool:FuzzAmbiguousKey \
	./internal/hooks:FuzzParse \
	./internal/aap:FuzzParseCreate \
	./internal/rules:FuzzShellAllow \
	./internal/rules:FuzzShellDifferential \
	./internal/web:FuzzAPIBody \
	./internal/web:FuzzDecisionForm \
	./internal/web:FuzzShareForm \
	./internal/web:FuzzWebSocketFrames

fuzz:
	@set -e; for t in $(FUZZ_TARGETS); do \
		pkg=$${t%%:*}; name=$${t##*:}; \
		echo "== $$name ($$pkg) for $(FUZZTIME)"; \
		$(GO) test -run '^$$' -fuzz "^$$name\$$" -fuzztime $(FUZZTIME) $(FUZZ_FLAGS) $$pkg; \
	done

# Countersign's benchmark cases (issue 9; bench/cmd/load): nested calls, the same under 1,000 rules
# (rules, issue 17), direct turns, peak RSS of the server binary, approval round trips, WebSocket
# fan-out, and issue 19's memory after 100 sessions (sessions) and fan-out of the session pages'
# HTML fragments (fanout_html), and issue 21's two replicas on one PostgreSQL database (replicas:
# the approval round trip across them and one session's fan-out over both), and issue 30's
# agents' hooks (hooks: POST /hooks/{kind} decided by a rule, one at a time and from 50 agents,
# and countersign-hook against curl), issue 31's MCP gateway (gateway: a rule-allowed tools/call
# through /mcp against the same call made straight to the upstream, and 100 clients), and issue 32's approval API (aap: create + long poll + decide round
# trip, 200 held long polls and their RSS). BENCH_RUNS=3 for medians; BENCH_CASES=rules for one case;
# BENCH_FLAGS='-cpuprofile cpu.out' (or '-sessions-inprocess -memprofile heap.out') for profiles;
# BENCH_CASES=hooks BENCH_FLAGS='-hooks-seconds 5' for a short hooks run (the goal is 30 s).
# Profiling: go test -run '^$$' -bench . -cpuprofile cpu.out ./internal/agent (see bench/RESULTS.md).
# replicas needs a PostgreSQL server: when BENCH_CASES names it, the load program runs under
# scripts/with-postgres.sh, which uses COUNTERSIGN_TEST_POSTGRES when it is set and otherwise
# starts a throwaway cluster (Debian's postgresql; fsync=off, PG_FSYNC=on for the other setting:
# each replicas line names it as pg_fsync) for the run;
# with neither, the case prints a line saying it was skipped. The other cases never need it.
BENCH_RUNS  ?= 1
BENCH_CASES ?= nested,rules,direct,rss,approval,fanout,sessions,fanout_html,hooks,gateway,aap,replicas
BENCH_FLAGS ?=
comma := ,
BENCH_PG = $(if $(filter replicas,$(subst $(comma), ,$(BENCH_CASES))),scripts/with-postgres.sh)
bench:
	$(BENCH_PG) $(GO) run ./bench/cmd/load -runs $(BENCH_RUNS) -cases $(BENCH_CASES) $(BENCH_FLAGS)

# The same cases side by side with the peers (pi and the Vercel AI SDK, copied from ../shared/peers
# to a temporary folder) in one run, medians of BENCH_PEERS_RUNS runs; writes bench/RESULTS.md and
# bench/runs/<date>.jsonl. Needs npm: the peers install their pinned packages and Node 24.
BENCH_PEERS_RUNS ?= 3
bench-peers:
	GO=$(GO) PEERS=../shared/peers bench/peers.sh $(BENCH_PEERS_RUNS)

vendor:
	cd e2e && $(NPM_CI)
	mkdir -p web/static/vendor
	cp e2e/node_modules/htmx.org/dist/htmx.min.js web/static/vendor/htmx.min.js
	cp e2e/node_modules/htmx-ext-ws/dist/ws.min.js web/static/vendor/htmx-ext-ws.min.js

clean:
	rm -rf bin e2e/test-results e2e/playwright-report e2e/blob-report e2e/.tmp
