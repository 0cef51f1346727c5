package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"countersign/internal/pgtest"
)

// teamRecipe is the first sh block of README.md's "Run it for a team", line by line, comments cut.
func teamRecipe(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(b), "\n## Run it for a team\n")
	_, block, ok2 := strings.Cut(section, "```sh\n")
	block, _, ok3 := strings.Cut(block, "```")
	if !ok || !ok2 || !ok3 {
		t.Fatal(`README.md has no sh block under "## Run it for a team"`)
	}
	var lines []string
	for _, l := range strings.Split(block, "\n") {
		if i := strings.Index(l, " #"); i >= 0 {
			l = l[:i]
		}
		if l = strings.TrimSpace(l); l != "" {
			lines = append(lines, l)
		}
	}
	return lines
}

// pgBin is the folder of PostgreSQL's client programs (psql, createdb): Debian's, else the PATH's.
func pgBin(t *testing.T) string {
	t.Helper()
	if m, _ := filepath.Glob("/usr/lib/postgresql/*/bin/createdb"); len(m) > 0 {
		return filepath.Dir(m[len(m)-1])
	}
	p, err := exec.LookPath("createdb")
	if err != nil {
		t.Skip("no createdb here")
	}
	return filepath.Dir(p)
}

// TestTheREADMEsTeamRecipeStartsTwoReplicas (issue 33 acceptance 6, its PostgreSQL part): the
// commands of README.md's "Run it for a team", run as written on the test server — only the
// names the recipe leaves to the reader are replaced (its host, the role's and database's name,
// made unique; files, folders and addresses on this machine; the token) — make a role and a
// database it owns, and start two replicas that serve one team. The recipe's older
// `createdb countersign` (owned by the superuser) is refused by PostgreSQL 15 for that role:
// "permission denied for schema public".
func TestTheREADMEsTeamRecipeStartsTwoReplicas(t *testing.T) {
	server, err := url.Parse(pgtest.ServerURL(t))
	if err != nil {
		t.Fatal(err)
	}
	name := "countersign_" + strings.ToLower(rand.Text()[:8])
	word := regexp.MustCompile(`\bcountersign\b`)
	dir := t.TempDir()
	workspace := filepath.Join(dir, "workspace")
	if err := os.Mkdir(workspace, 0o755); err != nil {
		t.Fatal(err)
	}
	bin := pgBin(t)
	pgEnv := append(os.Environ(), "PATH="+bin+":"+os.Getenv("PATH"), "PGHOST="+server.Hostname(), "PGPORT="+server.Port(),
		"PGUSER="+server.User.Username(), "PGDATABASE="+strings.TrimPrefix(server.Path, "/"))
	t.Cleanup(func() {
		for _, sql := range []string{`DROP DATABASE IF EXISTS ` + name + ` WITH (FORCE)`, `DROP DATABASE IF EXISTS ` + name + `_plain WITH (FORCE)`, `DROP ROLE IF EXISTS ` + name} {
			cmd := exec.Command("psql", "-c", sql)
			cmd.Env = pgEnv
			_ = cmd.Run()
		}
	})
	env := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")}
	var replicas [][]string
	for _, line := range teamRecipe(t) {
		switch {
		case strings.HasPrefix(line, "export "):
			k, v, _ := strings.Cut(strings.TrimPrefix(line, "export "), "=")
			v = strings.Trim(v, `'"`)
			switch k {
			case "COUNTERSIGN_DB":
				u, err := url.Parse(v)
				if err != nil {
					t.Fatalf("the recipe's %s: %v", k, err)
				}
				pw, _ := u.User.Password()
				u.User, u.Host, u.Path, u.RawQuery = url.UserPassword(name, pw), server.Host, "/"+name, "sslmode=disable"
				v = u.String()
			case "COUNTERSIGN_SHARE_KEY":
				v = filepath.Join(dir, filepath.Base(v))
			case "COUNTERSIGN_TOKEN":
				v = testToken
			case "COUNTERSIGN_WORKSPACE":
				v = workspace
			}
			env = append(env, k+"="+v)
		case strings.HasPrefix(line, "./countersign "):
			args := strings.Fields(strings.TrimPrefix(line, "./countersign "))
			for i, a := range args {
				if regexp.MustCompile(`^\d+\.\d+\.\d+\.\d+:\d+$`).MatchString(a) {
					args[i] = "127.0.0.1:0"
				}
			}
			replicas = append(replicas, args)
		default: // a command of the database's set-up, as a superuser
			cmd := exec.Command("bash", "-c", word.ReplaceAllString(line, name))
			cmd.Env = pgEnv
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("the recipe's %q: %v\n%s", line, err, out)
			}
		}
	}
	if len(replicas) != 2 {
		t.Fatalf("the recipe starts %d replicas, want 2", len(replicas))
	}
	var procs []*proc
	for _, args := range replicas { // one first: it makes the key file the other reads
		cmd := exec.Command(serverBinary(t), args...)
		cmd.Env = env
		p, out := startCmd(t, cmd)
		procs = append(procs, awaitLogin(t, p, out))
	}
	for _, p := range procs {
		res, err := http.Get(p.base + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != http.StatusOK {
			t.Fatalf("%s/readyz = %d", p.base, res.StatusCode)
		}
	}
	var s apiSession
	procs[0].mustAPI(t, http.StatusCreated, "POST", "/api/sessions", map[string]string{"title": "recipe", "model": "faux:demo"}, &s)
	if _, body := procs[1].api(t, "GET", "/api/sessions/"+s.ID, nil); !strings.Contains(string(body), "recipe") {
		t.Fatalf("replica 2 does not serve replica 1's session: %s", body)
	}

	// Without -O: the database is the superuser's, and PostgreSQL 15 lets the role make nothing
	// in its public schema.
	cmd := exec.Command("createdb", name+"_plain")
	cmd.Env = pgEnv
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("createdb: %v\n%s", err, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	plain := exec.CommandContext(ctx, serverBinary(t), "-addr", "127.0.0.1:0")
	plain.Env = envWithPlain(env, name)
	out, err := plain.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "permission denied for schema public") {
		t.Fatalf("a server on a database made by plain createdb: %v\n%s", err, firstLines(string(out), 10))
	}
}

// envWithPlain is env with COUNTERSIGN_DB naming database name_plain instead of name.
func envWithPlain(env []string, name string) []string {
	var out []string
	for _, e := range env {
		if k, v, _ := strings.Cut(e, "="); k == "COUNTERSIGN_DB" {
			e = k + "=" + strings.Replace(v, "/"+name+"?", "/"+name+"_plain?", 1)
		}
		out = append(out, e)
	}
	return out
}

// firstLines is s's first n lines.
func firstLines(s string, n int) string {
	var out []string
	sc := bufio.NewScanner(strings.NewReader(s))
	for sc.Scan() && len(out) < n {
		out = append(out, sc.Text())
	}
	return strings.Join(out, "\n")
}
