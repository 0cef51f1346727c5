package rules

import (
	"strings"
	"testing"

	"countersign/internal/gate"
)

// Options that run programs (SPEC §14): each row of optionTable, with a command that uses its
// entries under a prefix rule (asks), one that does not (allowed), and a rule that names the
// option itself (allowed).
func TestOptionTableMakesPrefixRulesAsk(t *testing.T) {
	rows := []struct {
		rule  string
		cases map[string]string // command → "allow" or "ask"
	}{
		{"git:*", map[string]string{
			"git -c core.pager=sh log":          "ask",
			"git -ccore.fsmonitor=sh status":    "ask",
			"git --config-env=core.pager=X log": "ask",
			"git --exec-path=/tmp status":       "ask",
			"git -C /elsewhere status":          "ask",
			"git -C sub status":                 "ask",
			"git --git-dir=/x/.git log":         "ask",
			"git --work-tree / status":          "ask",
			"git log -c":                        "allow", // a diff format after the subcommand
			"git diff -C":                       "allow", // finds copies
			"git --no-pager log -1":             "allow",
			"git status --short":                "allow",
		}},
		{"git -c core.pager=less log:*", map[string]string{
			"git -c core.pager=less log -1": "allow",
			"git -c core.pager=sh log -1":   "ask",
		}},
		{"git config:*", map[string]string{
			"git config core.pager sh":           "ask",
			"git config --global core.editor x":  "ask",
			"git config alias.st '!rm -rf x'":    "ask",
			"git config diff.x.textconv sh":      "ask",
			"git config filter.a.smudge sh":      "ask",
			"git config credential.helper '!sh'": "ask",
			"git config include.path /tmp/x":     "ask",
			`git config "$KEY" x`:                "ask",
			"git config --edit":                  "ask",
			"git config -f /tmp/c user.name x":   "ask",
			"git config user.name alice":         "allow",
			"git config --get user.email":        "allow",
		}},
		{"git clone:*", map[string]string{
			"git clone --template=/t https://x/r": "ask",
			"git clone -u 'sh -c id' r":           "ask",
			"git clone -c core.hooksPath=h r":     "ask",
			"git clone --config core.pager=sh r":  "ask",
			"git clone 'ext::sh -c id' r":         "ask",
			"git clone https://example.com/r.git": "allow",
		}},
		{"git rebase:*", map[string]string{"git rebase -x 'sh' main": "ask", "git rebase --exec=x main": "ask", "git rebase -i main": "ask", "git rebase main": "allow"}},
		{"git difftool:*", map[string]string{"git difftool -x sh": "ask", "git difftool --extcmd=sh": "ask", "git difftool -t vimdiff": "ask"}},
		{"git grep:*", map[string]string{"git grep -O x": "ask", "git grep --open-files-in-pager=sh x": "ask", "git grep -n x": "allow"}},
		{"git bisect:*", map[string]string{"git bisect run sh": "ask", "git bisect good": "allow"}},
		{"git submodule:*", map[string]string{"git submodule foreach id": "ask", "git submodule update": "allow"}},
		{"git filter-branch:*", map[string]string{"git filter-branch --tree-filter id": "ask"}},
		{"git send-email:*", map[string]string{"git send-email --sendmail-cmd=sh x": "ask", "git send-email --smtp-server=/bin/sh x": "ask"}},
		{"git log:*", map[string]string{
			"git log --output=/tmp/x": "ask", "git log --ext-diff": "ask", "git log -p --textconv": "ask",
			"git log --format=%H -5": "allow", "git log -- core.pager": "ask",
		}},

		{"go test:*", map[string]string{
			"go test -toolexec ./evil ./...":       "ask",
			"go test -toolexec=./evil ./...":       "ask",
			"go test --toolexec ./evil ./...":      "ask",
			"go test --toolexec=./evil ./...":      "ask",
			"go test -exec ./evil ./...":           "ask",
			"go test -exec=./evil ./...":           "ask",
			"go test -vettool=./evil ./...":        "ask",
			"go test -overlay=o.json ./...":        "ask",
			"go test -modfile=/tmp/go.mod ./...":   "ask",
			"go test -C /elsewhere ./...":          "ask",
			"go test -o /usr/local/bin/x ./...":    "ask",
			"go test -coverprofile=/tmp/c ./...":   "ask",
			"go test -ldflags=-extld=./evil ./...": "ask",
			`go test "-$X" ./...`:                  "ask",
			"go test ./...":                        "allow",
			"go test -race -count=1 ./...":         "allow",
			"go test -run TestX -v ./internal/...": "allow",
			"go test -cover ./...":                 "allow",
		}},
		{"go test -toolexec ./tool:*", map[string]string{"go test -toolexec ./tool ./...": "allow", "go test -toolexec ./tool -exec x ./...": "ask"}},
		{"go env:*", map[string]string{"go env -w GOFLAGS=-toolexec=x": "ask", "go env -u GOFLAGS": "ask", "go env GOPATH": "allow"}},
		{"go build:*", map[string]string{"go build -o /tmp/x .": "ask", "go build -ldflags '-s -w' .": "allow", "go build ./...": "allow"}},

		{"make test:*", map[string]string{
			"make test --eval='$(shell id)'":    "ask",
			"make test --ev='$(shell id)'":      "ask",
			"make test -E 'x:=1'":               "ask",
			"make test -f /tmp/evil.mk":         "ask",
			"make test -sf /tmp/evil.mk":        "ask",
			"make test -f/tmp/evil.mk":          "ask",
			"make test --file=/tmp/evil.mk":     "ask",
			"make test --makefile=/tmp/evil.mk": "ask",
			"make test -C ..":                   "ask",
			"make test --directory=..":          "ask",
			"make test -I /tmp":                 "ask",
			"make test CC=./evil":               "ask",
			"make test SHELL=/tmp/x":            "ask",
			`make test "$T"`:                    "ask",
			"make test":                         "allow",
			"make test -j4 -k":                  "allow",
			"make test --no-print-directory":    "allow",
		}},

		{"find:*", map[string]string{
			`find . -exec rm {} \;`: "ask", `find . -execdir sh {} +`: "ask", `find . -ok rm {} \;`: "ask",
			`find . -okdir rm {} \;`: "ask", "find . -delete": "ask", "find . -fprint /tmp/x": "ask",
			"find . -fprint0 x": "ask", "find . -fprintf x %p": "ask", "find . -fls x": "ask",
			"find . -name '*.go' -type f": "allow",
		}},

		{"npm run:*", map[string]string{
			"npm run test --script-shell=/tmp/x":           "ask",
			"npm run test --node-options=--require=./evil": "ask",
			"npm run test --userconfig=/tmp/npmrc":         "ask",
			"npm run build --npm_config_git=/tmp/x":        "ask",
			"npm run build":                                "allow",
			"npm run test -- --watch":                      "allow",
		}},
		{"npm:*", map[string]string{"npm exec evil": "ask", "npm x evil": "ask", "npm explore x -- sh": "ask",
			"npm --prefix /elsewhere test": "ask", "npm init evil": "ask", "npm test": "allow", "npm ci": "allow"}},
		{"npx:*", map[string]string{"npx -c 'id'": "ask", "npx --call=id": "ask", "npx -p evil x": "ask", "npx eslint .": "allow"}},
		{"pnpm:*", map[string]string{"pnpm dlx evil": "ask", "pnpm exec evil": "ask", "pnpm -C /x test": "ask", "pnpm test": "allow"}},
		{"yarn:*", map[string]string{"yarn dlx evil": "ask", "yarn exec evil": "ask", "yarn node -e x": "ask", "yarn test": "allow"}},
		{"bun:*", map[string]string{"bun -e 'x'": "ask", "bun x evil": "ask", "bun --preload ./e test": "ask", "bun test": "allow"}},

		{"python3:*", map[string]string{
			"python3 -c 'import os'": "ask", "python3 -Ic 'x'": "ask", "python3 -m http.server": "ask",
			"python3 -": "ask", "python3 script.py": "allow", "python3 -u -W ignore script.py": "allow",
		}},
		{"python3 -c 'print(1)'", map[string]string{"python3 -c 'print(1)'": "allow", "python3 -c 'print(2)'": "ask"}},
		{"node:*", map[string]string{"node -e x": "ask", "node --eval=x": "ask", "node -p x": "ask", "node -r ./e s.js": "ask",
			"node --require ./e s.js": "ask", "node --import ./e s.js": "ask", "node --inspect s.js": "ask",
			"node --env-file=.env s.js": "ask", "node s.js": "allow", "node --version": "allow"}},
		{"perl:*", map[string]string{"perl -e 'system 1'": "ask", "perl -ne 'print' f": "ask", "perl -MPOSIX s.pl": "ask",
			"perl -i.bak s f": "ask", "perl s.pl": "allow", "perl -w s.pl": "allow"}},
		{"ruby:*", map[string]string{"ruby -e x": "ask", "ruby -rx s.rb": "ask", "ruby s.rb": "allow"}},
		{"php:*", map[string]string{"php -r 'x'": "ask", "php -d auto_prepend_file=x s.php": "ask", "php s.php": "allow"}},
		{"lua:*", map[string]string{"lua -e x": "ask", "lua -l x s.lua": "ask", "lua s.lua": "allow"}},
		{"deno:*", map[string]string{"deno eval 'x'": "ask", "deno run -A x.ts": "ask", "deno run --allow-run x.ts": "ask", "deno run x.ts": "allow"}},

		{"awk:*", map[string]string{
			`awk '{system("id")}' f`:      "ask",
			`awk '{print > "/tmp/x"}' f`:  "ask",
			`awk '{print | "sh"}' f`:      "ask",
			`awk 'BEGIN{"id" | getline}'`: "ask",
			`awk '@load "x"'`:             "ask",
			"awk -f prog.awk f":           "ask",
			"awk -e 'x' f":                "ask",
			"awk --source='x' f":          "ask",
			`awk "$P" f`:                  "ask",
			`awk -F: '{print $1}' f`:      "allow",
			`awk -vx=1 '{print x}' f`:     "allow",
			`awk -v fs=1 '{print}' f`:     "allow",
			`awk -- '{print}' f`:          "allow",
		}},
		{"sed:*", map[string]string{
			"sed 's/a/b/e' f":             "ask",
			"sed 's/a/b/w /tmp/x' f":      "ask",
			"sed 's|a|b|gw x' f":          "ask",
			"sed -e 'e id' f":             "ask",
			"sed '1w /tmp/x' f":           "ask",
			"sed '/x/W /tmp/y' f":         "ask",
			"sed -n -e '1p' -e '2e id' f": "ask",
			"sed --expression=1e f":       "ask",
			"sed -ne '1e id' f":           "ask",
			"sed -i 's/a/b/' f":           "ask",
			"sed -i.bak 's/a/b/' f":       "ask",
			"sed --in-place 's/a/b/' f":   "ask",
			"sed -f s.sed f":              "ask",
			`sed "$S" f`:                  "ask",
			"sed 's/a/b/x' f":             "ask", // an unknown flag
			"sed -n '1p' f":               "allow",
			"sed 's/a/b/g' f":             "allow",
			"sed -e 's/a/b/' -e '2d' f":   "allow",
			"sed -ne 's/x/y/p' f":         "allow",
			"sed ':a;N;ba' f":             "allow",
			"sed '/^#/d;s/x/w/' f":        "allow",
			"sed '1a hello w e' f":        "allow",
			"sed 'y/abc/xyz/' f":          "allow",
		}},

		{"tar:*", map[string]string{
			"tar -xf a.tar --to-command=sh":               "ask",
			"tar -xf a.tar --to-com=sh":                   "ask",
			"tar -I sh -xf a.tar":                         "ask",
			"tar -xIf sh a.tar":                           "ask",
			"tar xIf sh a.tar":                            "ask",
			"tar -cf a.tar --use-compress-program=sh .":   "ask",
			"tar -cf a.tar --checkpoint-action=exec=sh .": "ask",
			"tar -cf a.tar -F x .":                        "ask",
			"tar -cf a.tar --info-script=x .":             "ask",
			"tar -xf h:a.tar --rsh-command=x":             "ask",
			"tar xzf a.tgz":                               "allow",
			"tar -czf a.tgz dir":                          "allow",
			"tar -tf a.tar":                               "allow",
		}},
		{"zip:*", map[string]string{"zip -T -TT 'sh -c id' a.zip f": "ask", "zip a.zip f": "allow"}},
		{"sort:*", map[string]string{"sort --compress-program=sh f": "ask", "sort -o /tmp/x f": "ask", "sort -no x f": "ask", "sort -n f": "allow", "sort -k 2 f": "allow"}},
		{"rsync:*", map[string]string{"rsync -e 'sh -c id' a b": "ask", "rsync --rsh=x a b": "ask", "rsync --rsync-path=x a b": "ask",
			"rsync -avze x a b": "ask", "rsync -av a/ b/": "allow"}},
		{"ssh:*", map[string]string{"ssh -o ProxyCommand=id host": "ask", "ssh -oProxyCommand=id host": "ask", "ssh -vo LocalCommand=id host": "ask",
			"ssh -F /tmp/cfg host": "ask", "ssh -p 22 host": "allow", "ssh host": "allow"}},
		{"scp:*", map[string]string{"scp -S ./evil a b": "ask", "scp -o ProxyCommand=id a b": "ask", "scp a b": "allow"}},
		{"sftp:*", map[string]string{"sftp -D ./evil host": "ask", "sftp -b cmds host": "ask", "sftp host": "allow"}},

		{"less:*", map[string]string{"less '+!id' f": "ask", "less -k keys f": "ask", "less --lesskey-file=k f": "ask", "less -N f": "allow"}},
		{"man:*", map[string]string{"man -P sh ls": "ask", "man --pager=sh ls": "ask", "man -H x ls": "ask", "man -p x ls": "ask", "man ls": "allow"}},
		{"vim:*", map[string]string{"vim -c '!id' f": "ask", "vim '+!id' f": "ask", "vim --cmd x f": "ask", "vim -u x f": "ask", "vim f": "allow"}},
		{"emacs:*", map[string]string{"emacs --eval '(x)'": "ask", "emacs -l x.el": "ask", "emacs f": "allow"}},
		{"rg:*", map[string]string{"rg --pre sh x": "ask", "rg --pre=sh x": "ask", "rg -n x": "allow"}},
		{"fd:*", map[string]string{"fd -x rm": "ask", "fd --exec rm": "ask", "fd -X rm": "ask", "fd x": "allow"}},
		{"curl:*", map[string]string{"curl -o /tmp/x u": "ask", "curl -sSLo x u": "ask", "curl -K cfg u": "ask", "curl --output-dir /tmp -O u": "ask",
			"curl -H 'x-o: y' u": "allow", "curl -sSL u": "allow"}},
		{"wget:*", map[string]string{"wget -e 'x' u": "ask", "wget -O /tmp/x u": "ask", "wget --execute=x u": "ask", "wget -q u": "allow"}},
		{"cmake:*", map[string]string{"cmake -E rm x": "ask", "cmake -P x.cmake": "ask", "cmake -S . -B build": "allow"}},
		{"printf:*", map[string]string{"printf -v PATH %s /tmp/evil": "ask", "printf '%s\\n' x": "allow"}},
		{"read:*", map[string]string{"read -r PATH": "ask", "read IFS": "ask", `read "$V"`: "ask", "read -r line": "allow"}},
		{"sqlite3:*", map[string]string{"sqlite3 db '.shell id'": "ask", "sqlite3 db '.output /tmp/x'": "ask", "sqlite3 db 'select 1'": "allow"}},

		// F1: GNU long options abbreviated, and clusters whose letter takes the next word, in the
		// options that carry sed's and awk's program text.
		{"sed:*", map[string]string{
			"sed -n --exp='1e touch /tmp/x' README": "ask",
			"sed -n --exp='1w /tmp/x' README":       "ask",
			"sed -n --exp '1e id' README":           "ask",
			"sed --e='1e id' f":                     "ask",
			"sed --expr=p --expr='1w x' f":          "ask",
			"sed -nl 5 '1e id' f":                   "ask",
			"sed --line 5 '1e id' f":                "ask",
			"sed --line-length 5 '1e id' f":         "ask",
			`sed "--exp$X" f`:                       "ask",
			"sed -n --exp=1p f":                     "allow",
			"sed --expression 's/a/b/' f":           "allow",
			"sed -nl 5 p f":                         "allow",
			"sed --line 5 p f":                      "allow",
		}},
		{"awk:*", map[string]string{
			`awk -bF : '{system("id")}' f`:    "ask",
			`awk --as x=1 '{system("id")}' f`: "ask",
			`awk --fie : '{system("id")}' f`:  "ask",
			"awk -W exec prog.awk":            "ask",
			"awk --so='BEGIN{}' f":            "ask",
			`awk --assign x=1 '{print x}' f`:  "allow",
			`awk --as x=1 '{print x}' f`:      "allow",
			`awk -bF : '{print $1}' f`:        "allow",
		}},
	}
	n := 0
	for _, row := range rows {
		set := mustCompile(t, []gate.Rule{{Effect: gate.Allow, Tool: "run_command", Specifier: row.rule, Scope: gate.ScopeServer}})
		for cmd, want := range row.cases {
			n++
			t.Run(row.rule+" "+cmd, func(t *testing.T) {
				d := set.Evaluate(commandCall(cmd))
				if got := outcome(d); got != want {
					t.Fatalf("%q under %s: got %s (%+v), want %s", cmd, row.rule, got, d, want)
				}
				named := strings.HasPrefix(cmd, strings.TrimSuffix(row.rule, ":*")) // the rule's words match
				if want == "ask" && named && !strings.Contains(d.Note, "is not covered by run_command("+row.rule+")") {
					t.Fatalf("%q: the note %q does not say which rule did not cover it", cmd, d.Note)
				}
			})
		}
	}
	if n < 200 {
		t.Fatalf("only %d cases", n)
	}
}
