// Command web is the Countersign server: `make run` starts it with the embedded faux model.
// Flags and their environment variables are listed in SPEC §11 and in -help.
package main

import (
	"context"
	"crypto/rand"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
	"unicode"
	"unicode/utf8"

	"countersign/internal/aap"
	"countersign/internal/agent"
	"countersign/internal/apperr"
	"countersign/internal/connections"
	"countersign/internal/fixtures"
	"countersign/internal/mcp"
	"countersign/internal/mcpproxy"
	"countersign/internal/metrics"
	"countersign/internal/models"
	"countersign/internal/notify"
	"countersign/internal/procenv"
	"countersign/internal/relay"
	"countersign/internal/render"
	"countersign/internal/rules"
	"countersign/internal/share"
	"countersign/internal/store"
	"countersign/internal/tool"
	"countersign/internal/tools"
	"countersign/internal/web"
)

func main() {
	// Started by the server as codemode's interpreter (tools.CodemodeConfig): nothing else runs.
	if len(os.Args) > 1 && os.Args[1] == tools.CodemodeWorkerArg {
		os.Exit(tools.ServeCodemodeWorker(os.Stdin, os.Stdout))
	}
	// Before anything else: processes of this user (tool commands, MCP servers) must not read
	// the owner token and API keys from /proc/<pid>/environ (harden_linux.go).
	if err := dropDumpable(); err != nil {
		fmt.Fprintln(os.Stderr, "countersign: warning: cannot mark the process non-dumpable; processes of this user can read its environment:", err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// `countersign mcp-proxy … -- <command>` (SPEC §18 Door 2): a stdio MCP server wrapped for
	// a client that launches only stdio servers; it speaks MCP on stdin and stdout.
	if len(os.Args) > 1 && os.Args[1] == "mcp-proxy" {
		code := mcpproxy.Main(ctx, os.Args[2:], os.Stdin, os.Stdout, os.Stderr, os.Getenv)
		stop()
		os.Exit(code)
	}
	if err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr); err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "countersign:", err)
		}
		os.Exit(1)
	}
}

// config is the server's configuration (SPEC §11): every flag has an environment variable, and
// the flag wins when both are set.
type config struct {
	addr string
	db   string // a SQLite file, or a postgres:// URL (isPostgres)
	// shareKey is -share-key, the file of the key that derives share-link tokens (SPEC §7); "" for
	// the default beside a SQLite file (shareKeyFile); required with PostgreSQL.
	shareKey        string
	workspace       string
	scripts         string
	token           string
	tokenFlag       bool // the token came from -token, which every user sees in ps
	tokenGenerated  bool // the server made the token: only then does the login line print it (issue 33)
	approvalTimeout time.Duration
	// drainTimeout bounds the wait, at SIGTERM, for the calls executing (Runner.Drain).
	drainTimeout time.Duration
	mcpConfig    string
	// policy is the policy file (SPEC §14): read-only rules and the sessions' default mode.
	policy       string
	fauxDelay    time.Duration
	fixtureTools bool
	sessionTTL   time.Duration
	// passEnv names the server's environment variables that tool commands and MCP stdio servers
	// get besides the allowlist (procenv).
	passEnv []string
	// systemPrompt is the -system-prompt file, instructions its text: a new session's default
	// instructions (SPEC §17); "" for the built-in ones.
	systemPrompt, instructions string
	// contextTokens is the context window requests are fitted into (SPEC §17); 0: each model's.
	contextTokens int
	// modelIdleTimeout ends a vendor model's turn after this long without data from it.
	modelIdleTimeout time.Duration
	// receivers are the -notify-webhook entries (SPEC §15); publicURL the base of the links
	// their events carry ("" until run knows the listen address: http://<addr>); retryBase the
	// delay after a failed delivery, doubled after each later one.
	receivers []notify.Receiver
	publicURL string
	retryBase time.Duration
	// aapInsecure lets AAP instances' receivers be http:// and non-public addresses (local
	// development and tests; SPEC §18 Door 3).
	aapInsecure bool
	// logJSON: -log-format json, logs as JSON lines with an access log (SPEC §16).
	logJSON bool
	// trustedProxies are the proxies whose X-Forwarded-For / -Proto are believed (SPEC §16).
	trustedProxies web.Proxies
	// retain deletes sessions idle longer than this (SPEC §16); 0 keeps them.
	retain time.Duration
	// metricsAddr, when set, serves /metrics without login on its own listener (SPEC §16).
	metricsAddr string
}

// stringList is a repeatable flag: each use appends its value.
type stringList []string

func (l *stringList) String() string     { return strings.Join(*l, ",") }
func (l *stringList) Set(v string) error { *l = append(*l, v); return nil }

// Owner tokens the server accepts: the token is the only secret between the network and a shell
// in the workspace, so it must not be guessable. minTokenLen is the fewest characters, and
// minTokenDistinct the fewest distinct characters (32 times "a" is 32 characters long).
const (
	minTokenLen      = 32
	minTokenDistinct = 8
)

// checkToken refuses an owner token that is weak or cannot be typed and printed as it is: fewer
// than minTokenLen characters, fewer than minTokenDistinct distinct ones, not UTF-8, or holding
// whitespace, a control character or an invisible formatting character (Unicode Cf: zero-width
// and bidi marks). The error names the rule and how to get a random token.
func checkToken(token string) error {
	const flag, random = "-token (COUNTERSIGN_TOKEN)", "(leave it unset for a random one)"
	if !utf8.ValidString(token) {
		return fmt.Errorf("%s is not valid UTF-8 %s", flag, random)
	}
	distinct := map[rune]bool{}
	for i, r := range []rune(token) {
		if unicode.IsSpace(r) || unicode.IsControl(r) || unicode.Is(unicode.Cf, r) {
			return fmt.Errorf("%s holds whitespace or an invisible or control character (%U at character %d); an owner token is printable characters only %s", flag, r, i+1, random)
		}
		distinct[r] = true
	}
	if n := utf8.RuneCountInString(token); n < minTokenLen {
		return fmt.Errorf("%s is %d characters; an owner token needs at least %d %s", flag, n, minTokenLen, random)
	}
	if len(distinct) < minTokenDistinct {
		return fmt.Errorf("%s uses only %d distinct characters; an owner token needs at least %d %s", flag, len(distinct), minTokenDistinct, random)
	}
	return nil
}

func parseConfig(args []string, getenv func(string) string, stderr io.Writer) (config, error) {
	var c config
	fs := flag.NewFlagSet("countersign", flag.ContinueOnError)
	fs.SetOutput(stderr)
	env := func(name, def string) string {
		if v := getenv(name); v != "" {
			return v
		}
		return def
	}
	cwd, _ := os.Getwd()
	fs.StringVar(&c.addr, "addr", env("COUNTERSIGN_ADDR", "127.0.0.1:8080"), "listen address (COUNTERSIGN_ADDR)")
	fs.StringVar(&c.db, "db", env("COUNTERSIGN_DB", "countersign.db"), "SQLite file, created with its folder, or a postgres:// URL (PostgreSQL, SPEC §16) (COUNTERSIGN_DB)")
	fs.StringVar(&c.shareKey, "share-key", env("COUNTERSIGN_SHARE_KEY", ""), "file of the key that derives share-link tokens, created when missing; default: the SQLite file's name + .share-key; required with a postgres:// -db (COUNTERSIGN_SHARE_KEY)")
	fs.StringVar(&c.workspace, "workspace", env("COUNTERSIGN_WORKSPACE", cwd), "where tools read, write and run (COUNTERSIGN_WORKSPACE)")
	fs.StringVar(&c.scripts, "scripts", env("COUNTERSIGN_SCRIPTS", ""), "folder of extra faux scripts, *.json (COUNTERSIGN_SCRIPTS)")
	fs.StringVar(&c.token, "token", env("COUNTERSIGN_TOKEN", ""), "owner token; random when empty (COUNTERSIGN_TOKEN)")
	timeout := env("COUNTERSIGN_APPROVAL_TIMEOUT", "15m")
	fs.StringVar(&timeout, "approval-timeout", timeout, "how long an approval may wait, a Go duration (COUNTERSIGN_APPROVAL_TIMEOUT)")
	drain := env("COUNTERSIGN_DRAIN_TIMEOUT", "30s")
	fs.StringVar(&drain, "drain-timeout", drain, "at SIGTERM or interrupt, how long the calls executing may go on to finish (their results stored) before they are stopped; no new run or call starts meanwhile; 0 stops them at once (COUNTERSIGN_DRAIN_TIMEOUT)")
	fs.StringVar(&c.mcpConfig, "mcp-config", env("COUNTERSIGN_MCP_CONFIG", ""), "MCP servers config file (COUNTERSIGN_MCP_CONFIG)")
	fs.StringVar(&c.policy, "policy", env("COUNTERSIGN_POLICY", ""), "policy file: read-only rules and the sessions' default mode, SPEC §14 (COUNTERSIGN_POLICY)")
	delay := env("COUNTERSIGN_FAUX_DELAY", "15ms")
	fs.StringVar(&delay, "faux-delay", delay, "pause between the faux model's text chunks (COUNTERSIGN_FAUX_DELAY)")
	ttl := env("COUNTERSIGN_SESSION_TTL", "720h")
	fs.StringVar(&ttl, "session-ttl", ttl, "how long a browser login lasts, a Go duration (COUNTERSIGN_SESSION_TTL)")
	passEnv := env("COUNTERSIGN_PASS_ENV", "")
	fs.StringVar(&passEnv, "pass-env", passEnv, "more environment variables, NAME,NAME…, that tool commands and MCP stdio servers get besides HOME LOGNAME PATH SHELL TERM USER LANG LC_* TMPDIR (COUNTERSIGN_PASS_ENV)")
	fs.StringVar(&c.systemPrompt, "system-prompt", env("COUNTERSIGN_SYSTEM_PROMPT", ""), "file with the default instructions (system prompt) of new sessions; {{workspace}} in it becomes the session's folder; built-in when unset (COUNTERSIGN_SYSTEM_PROMPT)")
	contextTokens := env("COUNTERSIGN_CONTEXT_TOKENS", "0")
	fs.StringVar(&contextTokens, "context-tokens", contextTokens, "context window, in tokens, that each model request is fitted into by shortening older tool results; 0 means each model's own (COUNTERSIGN_CONTEXT_TOKENS)")
	modelIdle := env("COUNTERSIGN_MODEL_IDLE_TIMEOUT", models.DefaultIdleTimeout.String())
	fs.StringVar(&modelIdle, "model-idle-timeout", modelIdle, "end a model turn whose provider sends nothing (no response, no streamed event) for this long, a Go duration (COUNTERSIGN_MODEL_IDLE_TIMEOUT)")
	// -notify-webhook is repeatable; any use of it replaces the environment's list.
	var webhooks stringList
	fs.Var(&webhooks, "notify-webhook", "webhook receiver of approval events, [name=]URL, repeatable; ?format=slack sends Slack's message shape; name is who decisions through its links are recorded as (COUNTERSIGN_NOTIFY_WEBHOOK, comma-separated)")
	fs.StringVar(&c.publicURL, "public-url", env("COUNTERSIGN_PUBLIC_URL", ""), "the server's address as webhook receivers, their people and connected agents reach it, for the links in events, share links and the Agents page's snippets; default http://<addr> (share links and snippets: the address the owner's browser used) (COUNTERSIGN_PUBLIC_URL)")
	retryBase := env("COUNTERSIGN_NOTIFY_RETRY_BASE", notify.DefaultRetryBase.String())
	fs.BoolVar(&c.aapInsecure, "aap-insecure-receivers", env("COUNTERSIGN_AAP_INSECURE_RECEIVERS", "") == "1", "let AAP instances' webhook receivers be http:// and loopback or private addresses: local development and tests only (COUNTERSIGN_AAP_INSECURE_RECEIVERS=1)")
	fs.StringVar(&retryBase, "notify-retry-base", retryBase, "wait after a failed webhook delivery, doubled after each later failure (with jitter), 8 attempts in all (COUNTERSIGN_NOTIFY_RETRY_BASE)")
	logFormat := env("COUNTERSIGN_LOG_FORMAT", "text")
	fs.StringVar(&logFormat, "log-format", logFormat, "text, or json: JSON lines with an access log of every request, tokens redacted (COUNTERSIGN_LOG_FORMAT)")
	proxies := env("COUNTERSIGN_TRUSTED_PROXIES", "")
	fs.StringVar(&proxies, "trusted-proxies", proxies, "CIDRs or addresses, comma-separated, of the proxies whose X-Forwarded-For and X-Forwarded-Proto are believed (COUNTERSIGN_TRUSTED_PROXIES)")
	fs.StringVar(&c.metricsAddr, "metrics-addr", env("COUNTERSIGN_METRICS_ADDR", ""), "also serve GET /metrics, without login, on this address (e.g. 127.0.0.1:9090); /metrics on -addr needs the owner token either way (COUNTERSIGN_METRICS_ADDR)")
	retain := env("COUNTERSIGN_RETAIN", "")
	fs.StringVar(&retain, "retain", retain, "delete sessions idle longer than this, e.g. 90d or 720h (checked at start and hourly; a session whose run is busy or parked is kept); unset keeps them (COUNTERSIGN_RETAIN)")
	// A boolean flag: -fixture-tools alone means true, -fixture-tools=false turns off what the
	// environment turned on. The environment takes true or false (strconv.ParseBool).
	var err error
	fixtures := env("COUNTERSIGN_FIXTURE_TOOLS", "false")
	if c.fixtureTools, err = strconv.ParseBool(fixtures); err != nil {
		return c, fmt.Errorf("COUNTERSIGN_FIXTURE_TOOLS %q: want true or false", fixtures)
	}
	fs.BoolVar(&c.fixtureTools, "fixture-tools", c.fixtureTools, "also register the fixture tools used by the browser tests (COUNTERSIGN_FIXTURE_TOOLS=true or false)")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	fs.Visit(func(f *flag.Flag) { c.tokenFlag = c.tokenFlag || f.Name == "token" })
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments: %s", strings.Join(fs.Args(), " "))
	}
	if c.shareKey == "" && isPostgres(c.db) {
		return c, errors.New("-share-key: a postgres:// -db needs the share key's file named (COUNTERSIGN_SHARE_KEY), the same on every server: it is never kept in the database (SPEC §7)")
	}
	if c.approvalTimeout, err = time.ParseDuration(timeout); err != nil || c.approvalTimeout <= 0 {
		return c, fmt.Errorf("-approval-timeout %q: want a positive Go duration such as 15m", timeout)
	}
	if c.drainTimeout, err = time.ParseDuration(drain); err != nil || c.drainTimeout < 0 {
		return c, fmt.Errorf("-drain-timeout %q: want a Go duration such as 30s (0: no wait)", drain)
	}
	if c.sessionTTL, err = time.ParseDuration(ttl); err != nil || c.sessionTTL <= 0 {
		return c, fmt.Errorf("-session-ttl %q: want a positive Go duration such as 720h", ttl)
	}
	if c.fauxDelay, err = time.ParseDuration(delay); err != nil || c.fauxDelay < 0 {
		return c, fmt.Errorf("-faux-delay %q: want a Go duration such as 15ms", delay)
	}
	if c.modelIdleTimeout, err = time.ParseDuration(modelIdle); err != nil || c.modelIdleTimeout <= 0 {
		return c, fmt.Errorf("-model-idle-timeout %q: want a positive Go duration such as 5m", modelIdle)
	}
	if c.contextTokens, err = strconv.Atoi(strings.TrimSpace(contextTokens)); err != nil || c.contextTokens < 0 {
		return c, fmt.Errorf("-context-tokens %q: want a whole number of tokens, such as 32000 (0: each model's own window)", contextTokens)
	}
	if c.contextTokens > 0 && c.contextTokens < minContextTokens {
		return c, fmt.Errorf("-context-tokens %d: want at least %d tokens (0: each model's own window)", c.contextTokens, minContextTokens)
	}
	switch logFormat {
	case "text":
	case "json":
		c.logJSON = true
	default:
		return c, fmt.Errorf("-log-format %q: want text or json", logFormat)
	}
	if c.trustedProxies, err = web.ParseProxies(proxies); err != nil {
		return c, err
	}
	if c.retain, err = parseRetain(retain); err != nil {
		return c, err
	}
	if c.systemPrompt != "" {
		if c.instructions, err = readSystemPrompt(c.systemPrompt); err != nil {
			return c, err
		}
	}
	if len(webhooks) == 0 {
		for _, e := range strings.Split(getenv("COUNTERSIGN_NOTIFY_WEBHOOK"), ",") {
			if strings.TrimSpace(e) != "" {
				webhooks = append(webhooks, e)
			}
		}
	}
	if c.receivers, err = notify.ParseReceivers(webhooks); err != nil {
		return c, err
	}
	if c.retryBase, err = time.ParseDuration(retryBase); err != nil || c.retryBase <= 0 {
		return c, fmt.Errorf("-notify-retry-base %q: want a positive Go duration such as 5s", retryBase)
	}
	if c.publicURL != "" {
		u, err := url.Parse(c.publicURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
			return c, fmt.Errorf("-public-url %q: want http(s)://host[:port][/path], the server's address as others reach it", c.publicURL)
		}
		c.publicURL = strings.TrimRight(c.publicURL, "/")
	}
	if c.passEnv, err = procenv.ParseNames(passEnv); err != nil {
		return c, fmt.Errorf("-pass-env: %v", err)
	}
	if c.workspace, err = filepath.Abs(c.workspace); err != nil {
		return c, fmt.Errorf("-workspace: %v", err)
	}
	if fi, err := os.Stat(c.workspace); err != nil || !fi.IsDir() {
		return c, fmt.Errorf("-workspace %s is not an existing folder", c.workspace)
	}
	switch {
	case c.token == "":
		// Two rand.Text() are 52 base32 characters, 260 random bits (one is only 26).
		c.token = rand.Text() + rand.Text()
		c.tokenGenerated = true
	default:
		if err := checkToken(c.token); err != nil {
			return c, err
		}
	}
	return c, nil
}

// minContextTokens is the smallest -context-tokens taken: below it the instructions and the
// tools' declarations alone leave no room for a conversation.
const minContextTokens = 1000

// readSystemPrompt reads the -system-prompt file: its text, or an error naming the file and
// what is wrong (missing, unreadable, empty, over agent.MaxInstructions bytes).
func readSystemPrompt(file string) (string, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return "", fmt.Errorf("-system-prompt: %v", err)
	}
	switch {
	case len(b) > agent.MaxInstructions:
		return "", fmt.Errorf("-system-prompt %s: %d bytes; the instructions take at most %d", file, len(b), agent.MaxInstructions)
	case !utf8.Valid(b):
		return "", fmt.Errorf("-system-prompt %s: not UTF-8 text", file)
	case strings.TrimSpace(string(b)) == "":
		return "", fmt.Errorf("-system-prompt %s is empty; leave the flag unset for the built-in instructions", file)
	}
	return string(b), nil
}

// parseRetain reads -retain: "" or "0" (keep sessions), a number of days ("90d"), or a Go
// duration ("720h"); at least an hour.
func parseRetain(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	if s == "" || s == "0" {
		return 0, nil
	}
	var d time.Duration
	if days, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.Atoi(days)
		if err != nil || n <= 0 {
			return 0, fmt.Errorf("-retain %q: want a number of days such as 90d, or a Go duration such as 720h", s)
		}
		d = time.Duration(n) * 24 * time.Hour
	} else {
		var err error
		if d, err = time.ParseDuration(s); err != nil {
			return 0, fmt.Errorf("-retain %q: want a number of days such as 90d, or a Go duration such as 720h", s)
		}
	}
	if d < time.Hour {
		return 0, fmt.Errorf("-retain %q: want at least an hour (unset keeps sessions forever)", s)
	}
	return d, nil
}

// retainEvery is how often -retain looks for idle sessions.
const retainEvery = time.Hour

// deleteIdle deletes the sessions idle longer than keep at now (-retain, SPEC §16) through the
// runner, as the Delete button does: with their transcript, approvals, links and audit. A
// session whose run is busy or parked on an approval is kept (the runner refuses it) and tried
// again next time. It returns how many were deleted.
func deleteIdle(ctx context.Context, log *slog.Logger, db store.Backend, runner *agent.Runner, keep time.Duration, now time.Time) int {
	ids, err := db.IdleSessions(ctx, now.Add(-keep))
	if err != nil {
		log.Warn("retain: listing idle sessions", "err", err)
		return 0
	}
	// An agent session holding an AAP request pending or decided within seven days is kept
	// (AAP v1 retention; SPEC §18 Door 3).
	held, err := db.AAPRetainedSessions(ctx, now.Add(-aap.Retention))
	if err != nil {
		log.Warn("retain: listing sessions with AAP requests to keep", "err", err)
		return 0
	}
	n := 0
	for _, id := range ids {
		if slices.Contains(held, id) {
			continue
		}
		switch err := runner.DeleteSession(ctx, id); {
		case err == nil:
			n++
		case apperr.CodeOf(err) == apperr.Conflict:
			// busy or parked: kept until it is idle
		default:
			log.Warn("retain: deleting an idle session", "session", id, "err", err)
		}
	}
	if n > 0 {
		log.Info("retain: deleted idle sessions", "deleted", n, "idleLongerThan", keep.String())
	}
	return n
}

// ruleHitsEvery is how often the rules' hits and last use reach the store (the Rules page reads
// the counts in memory, so it is current anyway; this bounds what a crash loses).
const ruleHitsEvery = 10 * time.Second

// aapExpireEvery is how often AAP requests past their deadline are expired (SPEC §18 Door 3); a
// read of one expires it at once too.
const aapExpireEvery = time.Second

// newHTTPServer is the HTTP server for h, whose requests' contexts derive from base, with the
// header, read, write and idle limits of web.DefaultTimeouts (WebSockets are not bound by them).
func newHTTPServer(h http.Handler, base context.Context) *http.Server {
	hs := &http.Server{Handler: h, BaseContext: func(net.Listener) context.Context { return base }}
	web.DefaultTimeouts.Apply(hs)
	return hs
}

// run wires the server by hand and serves until ctx ends, then shuts down gracefully.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	cfg, err := parseConfig(args, getenv, stderr)
	if err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	var accessLog *slog.Logger
	if cfg.logJSON {
		log = slog.New(slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
		accessLog = log.With("log", "access")
	}
	if cfg.tokenFlag {
		log.Warn("the owner token was given with -token, which every user of this machine can read in the process list (ps); prefer the COUNTERSIGN_TOKEN environment variable")
	}

	// The policy file is read before anything touches the database: a bad one refuses to start
	// with "file:line:col: reason" (SPEC §14) having changed nothing.
	var policy rules.Policy
	if cfg.policy != "" {
		if policy, err = rules.LoadPolicyFile(cfg.policy); err != nil {
			return err
		}
		log.Info("policy file", "file", cfg.policy, "rules", len(policy.Rules), "defaultMode", policy.DefaultMode)
	}
	// Vendors' models are offered when their keys (or base URLs) are set (SPEC §11, §17); a
	// setting they refuse (ANTHROPIC_THINKING) refuses to start, having changed nothing.
	vendors, err := models.Vendors(getenv, models.VendorOptions{IdleTimeout: cfg.modelIdleTimeout})
	if err != nil {
		return err
	}

	// One server per database: the lock comes before anything touches the database, the
	// listener before recovery, so a second start (same database, or a busy port) fails having
	// changed nothing (SPEC §8 recovery belongs to the one server that will serve).
	// (A PostgreSQL database has its lock in the database: openStore takes it.)
	if !isPostgres(cfg.db) {
		unlock, err := lockDatabase(cfg.db)
		if err != nil {
			return err
		}
		defer unlock()
		// Files an earlier version left readable by others become owner-only before SQLite
		// opens the database, so the -wal and -shm it makes follow the database's mode.
		if err := tightenPermissions(log, cfg.db); err != nil {
			return err
		}
	}
	// Listen before serving, so a busy port fails at once.
	ln, err := net.Listen("tcp", cfg.addr)
	if err != nil {
		return err
	}
	defer ln.Close()
	var metricsLn net.Listener
	if cfg.metricsAddr != "" {
		if metricsLn, err = net.Listen("tcp", cfg.metricsAddr); err != nil {
			return fmt.Errorf("-metrics-addr: %w", err)
		}
		defer metricsLn.Close()
	}

	db, closeDB, err := openStore(ctx, cfg.db)
	if err != nil {
		return err
	}
	defer closeDB()
	// Operators' series (SPEC §16); the live sockets are the web server's, made below.
	var srv *web.Server
	var leasesHeld func(context.Context) (int, error) // set once the replicas' link is made
	src := metrics.Sources{
		PendingApprovals: func(ctx context.Context) (int, error) { return db.PendingCount(ctx, "") },
		OutboxPending:    db.OutboxPending,
		LiveSockets: func() int {
			if srv == nil {
				return 0
			}
			return srv.LiveSockets()
		},
	}
	if isPostgres(cfg.db) {
		src.LeasesHeld = func(ctx context.Context) (int, error) {
			if leasesHeld == nil {
				return 0, nil
			}
			return leasesHeld(ctx)
		}
	}
	met := metrics.New(src)
	db.SetOnCommit(met.Commit)
	// The other servers sharing the database (SPEC §16), if any: one link, the relay that does
	// nothing for a SQLite file.
	// The key that derives share-link tokens lives beside the database, never in it (SPEC §7);
	// the replicas of one PostgreSQL database must all have the same file (SPEC §16), and their
	// relay signs every notification under a key derived from it (issue 33).
	freshShareKey := missing(cfg.shareKeyFile())
	key, err := share.LoadKey(cfg.shareKeyFile())
	if err != nil {
		return err
	}
	link := replicaLinkOf(db, key, log, met)
	leasesHeld = leasesOf(db, link)
	if err := link.CheckKey(ctx, "share", share.Fingerprint(key), cfg.shareKeyFile()); err != nil {
		return removeFresh(err, freshShareKey, cfg.shareKeyFile())
	}

	// The processes tool calls start are marked with the store, the session and the call, so
	// that recovery kills what a crash left running of its own calls only (SPEC §8).
	storeID, err := storeIdentity(ctx, db, cfg.db)
	if err != nil {
		return err
	}
	reg := tool.NewRegistry()
	all := tools.Builtin(tools.Config{PassEnv: cfg.passEnv, Protected: ownFiles(cfg), StoreID: storeID})
	if cfg.fixtureTools {
		all = append(all, fixtures.Tools()...)
	}
	for _, t := range all {
		if err := reg.Register(t); err != nil {
			return err
		}
	}
	// The metrics' tool label is a registered tool's name, else "other" (issue 33: a name a
	// model invents is no new series).
	met.SetTools(func(name string) bool { _, ok := reg.Lookup(name); return ok })
	// MCP servers' tools join the registry as <server>__<tool> (SPEC §13); a bad config file
	// refuses to start, a server that is down does not.
	var sources func() []web.ToolSource
	// Door 2 (SPEC §18): /mcp offers the MCP tools the registry holds; the server hears of
	// changes once it exists (gatewaySrv).
	var gatewayTools func() []*tool.Tool
	var gatewaySrv atomic.Pointer[web.Server]
	if cfg.mcpConfig != "" {
		mc, err := mcp.LoadConfig(cfg.mcpConfig)
		if err != nil {
			return err
		}
		mc.PassEnv = cfg.passEnv
		mcpm := mcp.NewManager(mc, log.With("component", "mcp"))
		refresh := func() {
			added, err := mcpm.RegisterTools(reg)
			if len(added) > 0 || err != nil {
				log.Info("MCP tools", "registered", added, "refused", err)
			}
			if s := gatewaySrv.Load(); s != nil {
				s.GatewayToolsChanged()
			}
		}
		mcpm.OnChange(refresh)
		mcpm.Start(ctx)
		refresh()
		defer mcpm.Close()
		gatewayTools = func() []*tool.Tool {
			var out []*tool.Tool
			for _, t := range mcpm.Tools() {
				if rt, ok := reg.Lookup(t.Name); ok && rt == t {
					out = append(out, t)
				}
			}
			return out
		}
		sources = func() []web.ToolSource {
			var out []web.ToolSource
			for _, st := range mcpm.Servers() {
				out = append(out, web.ToolSource{Name: st.Name, Kind: "MCP " + st.Transport, Trusted: st.Trusted,
					State: string(st.State), Error: st.Error, Tools: st.Tools, Warnings: st.Warnings})
			}
			return out
		}
	}
	faux, err := models.NewRegistry(cfg.scripts, cfg.fauxDelay, log)
	if err != nil {
		return err
	}
	mods := models.NewCatalog(faux, vendors)
	log.Info("models offered", "models", strings.Join(mods.Names(), ", "))
	// Webhooks (SPEC §15): the signing key lives beside the database, like the share key; the
	// store writes the outbox rows with the approvals, the worker delivers them off the gate's
	// path, from the first start's leftovers on, and stops before the database closes.
	newSecret := "" // printed once, after the login line
	// A receiver no longer given (or all of them, when none is) loses its unused decision links
	// and its pending events: removing a receiver kills its links (issue 33). Done once the keys
	// are checked (a refused start changes nothing) and before the worker runs.
	forgetRemoved := func() error {
		keep := make([]string, len(cfg.receivers))
		for i, r := range cfg.receivers {
			keep[i] = r.ID
		}
		n, err := db.ForgetReceivers(ctx, keep, time.Now())
		if n > 0 {
			log.Info("decision links of removed webhook receivers deleted", "links", n)
		}
		return err
	}
	if len(cfg.receivers) > 0 {
		nkey, created, err := notify.LoadKey(cfg.notifyKeyFile())
		if err != nil {
			return err
		}
		if err := link.CheckKey(ctx, "notify", nkey.Fingerprint(), cfg.notifyKeyFile()); err != nil {
			return removeFresh(err, created, cfg.notifyKeyFile())
		}
		if err := forgetRemoved(); err != nil {
			return err
		}
		if created {
			newSecret = nkey.Secret()
		}
		public := cfg.publicURL
		if public == "" {
			public = "http://" + ln.Addr().String()
		}
		// Decision links' tokens are random, sealed for the worker under the share key, which no
		// receiver holds (the webhook secret every receiver holds derives nothing; issue 33).
		links, err := notify.NewLinkTokens(key)
		if err != nil {
			return err
		}
		worker := notify.NewWorker(notify.WorkerConfig{Outbox: db, Clock: db.Clock, Receivers: cfg.receivers, Key: nkey, Links: links, PublicURL: public,
			RetryBase: cfg.retryBase, Diff: render.UnifiedDiff, Logger: log.With("component", "webhooks")})
		db.SetNotify(cfg.receivers, links, worker.Wake)
		defer background(ctx, worker.Run)()
		for _, r := range cfg.receivers {
			log.Info("webhook receiver", "recipient", r.Name, "id", r.ID, "format", r.Format, "key", cfg.notifyKeyFile(), "publicURL", public)
		}
	} else if err := forgetRemoved(); err != nil {
		return err
	}
	broker := agent.NewBroker()
	acfg := agent.Config{Store: db, Models: mods, Tools: reg, Broker: broker, Observer: met,
		ApprovalTimeout: cfg.approvalTimeout, Logger: log,
		// Rules (SPEC §14): compiled, parsed and suggested by internal/rules.
		CompileRules: rules.NewCompiler(ownFiles(cfg)), ParseRule: rules.Parse, SuggestRule: rules.Suggest,
		PolicyRules: policy.Rules, DefaultMode: policy.DefaultMode,
		// Instructions and the context budget (SPEC §17).
		Instructions: cfg.instructions, ContextTokens: cfg.contextTokens,
		// What a call left running when the last process died is killed before the call is
		// recorded as interrupted (SPEC §8).
		KillOrphans: killOrphans(storeID, log),
		// Several servers on one PostgreSQL database (SPEC §16), or this one alone.
		Replicas: link}
	runner := agent.New(acfg)
	// Listening before recovery: what another replica publishes from now on reaches this one's
	// viewers. Stopped after the runner's last event (deferred before the runner's wait below
	// is, so it runs after it).
	stopRelay, err := link.Start(ctx, runner.Replica())
	if err != nil {
		return err
	}
	defer stopRelay()
	// What the last process left behind is settled before anything is served (SPEC §8); with
	// replicas, what dead replicas left, whose leases expired.
	if err := runner.Recover(ctx); err != nil {
		return err
	}
	// Outside agents' calls still pending lost their hook requests with the last process (SPEC
	// §18): they are marked "the agent stopped waiting". Only for a server alone on its
	// database: with replicas, another one may hold them right now.
	if _, alone := link.(*relay.Single); alone {
		if err := runner.Gate().RecoverOutside(ctx); err != nil {
			return err
		}
	}
	defer background(ctx, func(ctx context.Context) { runner.Replica().RunLeases(ctx, agent.LeaseEvery) })()
	// Rules' hits are counted in memory on the calls' path and written to the store off it:
	// every ruleHitsEvery, and once more when the server stops (before the database closes).
	defer background(ctx, func(ctx context.Context) { runner.Gate().FlushRuleHitsEvery(ctx, ruleHitsEvery) })()
	if cfg.retain > 0 {
		defer background(ctx, func(ctx context.Context) {
			t := time.NewTicker(retainEvery)
			defer t.Stop()
			for {
				deleteIdle(ctx, log, db, runner, cfg.retain, time.Now())
				select {
				case <-ctx.Done():
					return
				case <-t.C:
				}
			}
		})()
	}
	met.SetActiveRuns(runner.ActiveRuns)
	// Door 3 (SPEC §18): AAP requests whose deadline passed while pending become expired, those
	// the last process left included.
	// One connections service for every door: a revocation anywhere forgets its cached token.
	conns := connections.NewService(db)
	aapRequests := aap.NewService(runner.Gate(), db, log)
	defer background(ctx, func(ctx context.Context) { aapRequests.Run(ctx, aapExpireEvery) })()
	aapInstances := aap.NewProvisioner(aap.ProvisionerConfig{Store: db, Pending: db, Gate: runner.Gate(),
		Conns: aapConnections{conns}, Sealer: aap.NewSealer(cfg.token), Insecure: cfg.aapInsecure,
		RetryBase: cfg.retryBase, Logger: log.With("component", "aap")})
	defer background(ctx, func(ctx context.Context) { aapInstances.Run(ctx, aapExpireEvery) })()
	// Failed token attempts (SPEC §16): in the database when replicas share it, so that three
	// replicas give a client one allowance, not three; one server per SQLite file counts them in
	// memory, without a read per request.
	var failedTokens web.FailedTokens
	if isPostgres(cfg.db) {
		failedTokens = db
	}
	// While draining at shutdown, /readyz answers 503: the replica takes no new work.
	var draining atomic.Bool
	ready := func(ctx context.Context) error {
		if draining.Load() {
			return apperr.Errorf(apperr.Internal, "the server is shutting down")
		}
		return db.Ready(ctx)
	}
	srv = web.New(web.Config{AAP: aapRequests, AAPInstances: aapInstances, Peers: link, Shares: share.NewService(db, key), Connections: conns, PublicURL: cfg.publicURL, Runner: runner, Gate: runner.Gate(), Store: db, Broker: broker, Models: mods,
		OwnerToken: cfg.token, Workspace: cfg.workspace, Logger: log, Sources: sources,
		OwnerSessions: db, SessionTTL: cfg.sessionTTL, Notify: db, Receivers: cfg.receivers,
		TrustedProxies: cfg.trustedProxies, AccessLog: accessLog, Ready: ready, FailedTokens: failedTokens, Metrics: met.Handler(), GatewayTools: gatewayTools})
	gatewaySrv.Store(srv)

	// Requests (and the WebSockets they became) end when the server shuts down.
	baseCtx, cancelBase := context.WithCancel(context.Background())
	defer cancelBase()
	hs := newHTTPServer(srv.Handler(), baseCtx)
	if cfg.tokenGenerated {
		fmt.Fprintf(stdout, "Countersign listening on %s\n", loginURL("http://"+ln.Addr().String(), cfg.token))
	} else {
		fmt.Fprintf(stdout, "Countersign listening on http://%s/login?token=…\n", ln.Addr())
		log.Info("the owner token is the one set with -token or COUNTERSIGN_TOKEN; it is not printed")
	}
	if newSecret != "" {
		fmt.Fprintf(stdout, "Webhook signing secret (Standard Webhooks; configure your receivers with it; shown this once, kept in %s): %s\n",
			cfg.notifyKeyFile(), newSecret)
	}

	errc := make(chan error, 2)
	go func() { errc <- hs.Serve(ln) }()
	if metricsLn != nil {
		mux := http.NewServeMux()
		mux.Handle("GET /metrics", met.Handler())
		ms := newHTTPServer(mux, baseCtx)
		go func() { errc <- ms.Serve(metricsLn) }()
		defer ms.Close()
		log.Info("metrics", "url", "http://"+metricsLn.Addr().String()+"/metrics")
	}
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	// A graceful drain (issue 33): no new run or call starts, /readyz says so (a load balancer
	// sends the next requests elsewhere), and the calls executing may finish, their results
	// stored, for up to -drain-timeout; pages, sockets and decisions keep being served.
	draining.Store(true)
	log.Info("shutting down: draining", "timeout", cfg.drainTimeout)
	drainCtx, cancelDrain := context.WithTimeout(context.Background(), cfg.drainTimeout)
	if err := runner.Drain(drainCtx); err != nil {
		log.Warn("calls still executing after -drain-timeout are stopped", "timeout", cfg.drainTimeout)
	}
	cancelDrain()
	log.Info("shutting down")
	// Executing calls stop; runs waiting for a person's decision stay parked, their approvals
	// pending for the next start (SPEC §8).
	runner.Shutdown("server shutdown")
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = hs.Shutdown(shutdownCtx)
	cancelBase()
	// The runs end, then the records still queued (the gateway's calls a rule allowed, written
	// after their answer) are written: a budget of its own, not what is left of the handlers'
	// (a call held for a person may have used all of it).
	waitCtx, cancelWait := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancelWait()
	done := make(chan struct{})
	go func() { runner.Wait(); close(done) }()
	select {
	case <-done:
	case <-waitCtx.Done():
		log.Warn("shutting down before every run ended and every queued record was written")
	}
	return nil
}

// missing reports whether file does not exist (a key file this start is about to create).
func missing(file string) bool {
	_, err := os.Stat(file)
	return errors.Is(err, os.ErrNotExist)
}

// removeFresh returns err, the refusal of a key this start made (fresh) because the database
// knows another, after removing the key's file: a refused start leaves no wrong key behind for
// the next start to trip on, or for an operator to copy to the other replicas (issue 33).
func removeFresh(err error, fresh bool, file string) error {
	if fresh {
		if rmErr := os.Remove(file); rmErr != nil && !errors.Is(rmErr, os.ErrNotExist) {
			return fmt.Errorf("%w (and the new key file %s it made could not be removed: %v)", err, file, rmErr)
		}
	}
	return err
}

// loginURL is the URL under base (http://host:port) that exchanges token for a login: /login
// with the token query-encoded, so a token holding +, & or % logs in as typed (issue 33).
func loginURL(base, token string) string {
	return base + "/login?" + url.Values{"token": {token}}.Encode()
}

// background runs fn in a goroutine with a context of parent's own and returns its stop: cancel
// that context, then wait for fn to return. The server's loops (webhooks, relay, leases, rule
// hits, retention) each run so, stopped by a defer in reverse order of their start.
func background(parent context.Context, fn func(ctx context.Context)) (stop func()) {
	ctx, cancel := context.WithCancel(parent)
	done := make(chan struct{})
	go func() { defer close(done); fn(ctx) }()
	return func() { cancel(); <-done }
}

// shareKeyFile is the file of the key that derives share-link tokens: -share-key, else beside
// the SQLite file (SPEC §7: never in the database).
func (c config) shareKeyFile() string {
	if c.shareKey != "" {
		return c.shareKey
	}
	return c.db + ".share-key"
}

// notifyKeyFile is the file of the webhooks' signing key (SPEC §15): beside the SQLite file, or,
// with PostgreSQL, beside the share key (its name with .notify-key for .share-key), so the
// servers of one database that share the one share the other.
func (c config) notifyKeyFile() string {
	if isPostgres(c.db) {
		return strings.TrimSuffix(c.shareKeyFile(), ".share-key") + ".notify-key"
	}
	return c.db + ".notify-key"
}

// ownFiles are the files of the server that the file tools must never read or write and that
// no command allowed by a rule may redirect to (SPEC §14: the agent can never write its own
// rules; issue 28): the database with its -wal, -shm and -journal files and its lock, the share
// and notify keys, the policy file, the MCP config (-mcp-config: its servers' secrets, and the
// programs the next start runs), the -system-prompt file and the -scripts folder's scripts
// (<folder>/*.json, what models.LoadDir reads: a new one is a model the next session may pick).
func ownFiles(cfg config) tools.Protected {
	var files tools.Protected
	if !isPostgres(cfg.db) {
		for _, suffix := range []string{"", "-wal", "-shm", "-journal", ".lock"} {
			files = append(files, cfg.db+suffix)
		}
	}
	files = append(files, cfg.shareKeyFile(), cfg.notifyKeyFile())
	for _, f := range []string{cfg.policy, cfg.mcpConfig, cfg.systemPrompt} {
		if f != "" {
			files = append(files, f)
		}
	}
	if cfg.scripts != "" {
		files = append(files, filepath.Join(cfg.scripts, "*.json"))
	}
	return files
}
