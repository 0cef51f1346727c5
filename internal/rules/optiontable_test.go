package rules

import (
	"slices"
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

		// F2: compilers, linkers, rustc and cargo.
		{"gcc:*", map[string]string{
			"gcc -wrapper sh,-c,'touch x' -c x.c": "ask",
			"gcc -fplugin=./evil.so -c x.c":       "ask",
			"gcc -B/tmp/evil -c x.c":              "ask",
			"gcc -B /tmp/evil -c x.c":             "ask",
			"gcc -specs=/tmp/s -c x.c":            "ask",
			"gcc --specs=/tmp/s -c x.c":           "ask",
			"gcc --specs /tmp/s -c x.c":           "ask",
			"gcc --spec=/tmp/s -c x.c":            "ask",
			"gcc -Wl,-plugin,/tmp/p.so x.c":       "ask",
			"gcc -Xlinker -plugin x.c":            "ask",
			"gcc @opts x.c":                       "ask",
			"gcc -o /tmp/x x.c":                   "ask",
			"gcc -MD -MF /tmp/x.d -c x.c":         "ask",
			"gcc -fuse-ld=/tmp/ld x.c":            "ask",
			"gcc -c -O2 -Wall x.c":                "allow",
			"gcc -E -Iinclude x.c":                "allow",
		}},
		{"cc:*", map[string]string{"cc -wrapper sh,-c,id -c x.c": "ask", "cc -c x.c": "allow"}},
		{"g++:*", map[string]string{"g++ -fplugin=x.so -c x.cc": "ask", "g++ -std=c++20 -c x.cc": "allow"}},
		{"c++:*", map[string]string{"c++ -wrapper sh -c x.cc": "ask", "c++ -c x.cc": "allow"}},
		{"clang:*", map[string]string{
			"clang -fuse-ld=/tmp/ld x.c":                "ask",
			"clang --ld-path=/tmp/ld x.c":               "ask",
			"clang -Xclang -load -Xclang ./e.so -c x.c": "ask",
			"clang -fpass-plugin=./p.so -c x.c":         "ask",
			"clang --config=/tmp/c x.c":                 "ask",
			"clang --gcc-toolchain=/tmp/t x.c":          "ask",
			"clang -cc1 -load ./e.so x.c":               "ask",
			"clang -std=c11 -Iinclude -Wall -c x.c":     "allow",
			"clang -fsanitize=address -g -c x.c":        "allow",
		}},
		{"clang++:*", map[string]string{"clang++ -fplugin=x.so x.cc": "ask", "clang++ -c x.cc": "allow"}},
		{"x86_64-linux-gnu-gcc:*", map[string]string{"x86_64-linux-gnu-gcc -wrapper sh x.c": "ask", "x86_64-linux-gnu-gcc -c x.c": "allow"}},
		{"gcc-12:*", map[string]string{"gcc-12 -wrapper sh x.c": "ask"}},
		{"clang-17:*", map[string]string{"clang-17 -fplugin=x.so x.c": "ask"}},
		{"tcc:*", map[string]string{"tcc -run x.c": "ask", "tcc -c x.c": "allow"}},
		{"ld:*", map[string]string{
			"ld -plugin /tmp/p.so x.o":  "ask",
			"ld --plugin=/tmp/p.so x.o": "ask",
			"ld -plug /tmp/p.so x.o":    "ask",
			"ld --plu=/tmp/p.so x.o":    "ask",
			"ld -o /tmp/x x.o":          "ask",
			"ld @opts":                  "ask",
			"ld -r a.o b.o":             "allow", // -r is a short option, not an abbreviation of -run
			"ld -shared a.o":            "allow",
		}},
		{"mold:*", map[string]string{"mold -run make": "ask"}},
		{"rustc:*", map[string]string{
			"rustc -C linker=sh x.rs":                  "ask",
			"rustc -Clinker=./evil x.rs":               "ask",
			"rustc --codegen link-arg=-fplugin x.rs":   "ask",
			"rustc -Z codegen-backend=/tmp/b.so x.rs":  "ask",
			"rustc --extern m=/tmp/libm.so x.rs":       "ask",
			"rustc -L /tmp/evil x.rs":                  "ask",
			"rustc @args":                              "ask",
			"rustc -o /tmp/x x.rs":                     "ask",
			"rustc -O x.rs":                            "allow",
			"rustc --edition 2021 -C opt-level=3 x.rs": "allow",
		}},
		{"cargo:*", map[string]string{
			"cargo -Z unstable-options build":                 "ask",
			"cargo build -Zbuild-std":                         "ask",
			"cargo -C /elsewhere build":                       "ask",
			"cargo build --manifest-path /tmp/x/Cargo.toml":   "ask",
			"cargo build --target-dir /tmp/t":                 "ask",
			"cargo install evil":                              "ask",
			"cargo rustc -- -C linker=sh":                     "ask",
			`cargo --config 'build.rustc-wrapper="sh"' build`: "ask",
			"cargo build --release":                           "allow",
			"cargo test -p mycrate":                           "allow",
		}},

		// F3: go test's -test.X and --test.X spellings, and -args.
		{"go test:*", map[string]string{
			"go test -test.cpuprofile=/tmp/x .":       "ask",
			"go test . -args -test.trace=/tmp/x":      "ask",
			"go test --test.coverprofile=/tmp/x .":    "ask",
			"go test -test.outputdir=/tmp .":          "ask",
			"go test -test.memprofile /tmp/x .":       "ask",
			"go test -test.gocoverdir=/tmp/x .":       "ask",
			"go test -gocoverdir=/tmp/x .":            "ask",
			"go test . -test.testlogfile=/tmp/x":      "ask",
			"go test -args x":                         "ask",
			"go test --args x":                        "ask",
			`go test "-test.$X" .`:                    "ask",
			"go test -ldflags=-extar=./evil ./...":    "ask",
			"go test -test.v -test.run=TestX .":       "allow",
			"go test -test.count=1 -test.short ./...": "allow",
		}},

		// F4: git format-patch -o, git archive -o, and their kin.
		{"git format-patch:*", map[string]string{
			"git format-patch -o /tmp/x HEAD~1":                 "ask",
			"git format-patch -o/tmp/x HEAD~1":                  "ask",
			"git format-patch -ko /tmp/x HEAD~1":                "ask",
			"git format-patch --output-directory /tmp/x HEAD~1": "ask",
			"git format-patch --output-d=/tmp/x HEAD~1":         "ask",
			"git format-patch --output=/tmp/x.patch HEAD~1":     "ask",
			"git format-patch -1 HEAD":                          "allow",
			"git format-patch --stdout HEAD~1":                  "allow",
			"git format-patch -v2 --cover-letter HEAD~3":        "allow",
		}},
		{"git archive:*", map[string]string{
			"git archive -o /tmp/x.tar HEAD":   "ask",
			"git archive -vo /tmp/x.tar HEAD":  "ask",
			"git archive --output=/tmp/x HEAD": "ask",
			"git archive --outp /tmp/x HEAD":   "ask",
			"git archive --format=tar HEAD":    "allow",
		}},
		{"git diff:*", map[string]string{"git diff --output=/tmp/x": "ask", "git diff --outp /tmp/x": "ask", "git diff --stat": "allow"}},
		{"git rebase:*", map[string]string{"git rebase -kx sh main": "ask", "git rebase -qi main": "ask", "git rebase -Xours main": "allow"}},
		{"git clone:*", map[string]string{"git clone -qu 'sh -c id' r": "ask", "git clone -b main https://x/r": "allow"}},
		{"git grep:*", map[string]string{"git grep -nO x": "ask", "git grep -e Ox": "allow"}},
		{"git apply:*", map[string]string{"git apply --unsafe-paths p.diff": "ask", "git apply p.diff": "allow"}},
		{"git checkout-index:*", map[string]string{"git checkout-index -a --prefix=/tmp/x/": "ask", "git checkout-index -a": "allow"}},

		// F5: ssh's remote command is a line for the remote shell: only a rule naming every word
		// after the host covers it.
		{"ssh build01:*", map[string]string{
			"ssh build01 uptime":     "ask",
			"ssh build01 'rm -rf ~'": "ask",
			"ssh build01 -- id":      "ask",
			"ssh build01":            "allow",
		}},
		{"ssh build01 uptime:*", map[string]string{
			"ssh build01 uptime":              "allow",
			"ssh build01 uptime '; rm -rf ~'": "ask",
		}},
		{"ssh:*", map[string]string{"ssh host id": "ask", "ssh -p 22 host id": "ask", "ssh -vp 22 host": "allow"}},

		// F6: pytest, and python -m pytest.
		{"pytest:*", map[string]string{
			"pytest --basetemp=/home/u .":  "ask",
			"pytest --basetemp /tmp/x":     "ask",
			"pytest --base=/tmp/x":         "ask",
			"pytest -p evil":               "ask",
			"pytest -pevil":                "ask",
			"pytest -vp evil":              "ask",
			"pytest -c /tmp/x.ini":         "ask",
			"pytest --config-file=/tmp/x":  "ask",
			"pytest -o cache_dir=/tmp/x":   "ask",
			"pytest --rootdir=/tmp":        "ask",
			"pytest --confcutdir=/":        "ask",
			"pytest --junitxml=/tmp/x.xml": "ask",
			"pytest --pastebin=all":        "ask",
			"pytest --pdbcls=evil:X":       "ask",
			"pytest":                       "allow",
			"pytest -x -q tests/":          "allow",
			"pytest -p no:cacheprovider":   "allow",
			"pytest --co":                  "allow",
			"pytest -k 'not slow' -v":      "allow",
			"pytest -rA --lf":              "allow",
		}},
		{"python3 -m pytest:*", map[string]string{
			"python3 -m pytest --basetemp=/tmp/x": "ask",
			"python3 -m pytest -p evil":           "ask",
			"python3 -m pytest -x tests/":         "allow",
		}},
		{"python3 -mpytest:*", map[string]string{"python3 -mpytest --basetemp=/tmp/x": "ask", "python3 -mpytest -q": "allow"}},
		{"python3 -B -m pytest:*", map[string]string{"python3 -B -m pytest --rootdir=/tmp": "ask"}},

		// Siblings: options that copy the input to a file, read commands from one, or run one.
		{"less:*", map[string]string{"less -o /tmp/x f": "ask", "less -No /tmp/x f": "ask", "less --log-file=/tmp/x f": "ask",
			"less --log=/tmp/x f": "ask", "less -R f": "allow", "less -p pattern f": "allow"}},
		{"vim:*", map[string]string{"vim -s keys.txt f": "ask", "vim -W /tmp/x f": "ask", "vim -es f": "ask", "vim -R f": "allow"}},
		{"emacs:*", map[string]string{"emacs -eval '(x)'": "ask", "emacs --ev '(x)'": "ask", "emacs -nw f": "allow"}},
		{"curl:*", map[string]string{"curl --remote-name u": "ask", "curl -w '%output{/tmp/x}%{http_code}' u": "ask", "curl -w '%{http_code}' u": "allow"}},
		{"wget:*", map[string]string{"wget --use-askpass=sh u": "ask", "wget --save-cookies /tmp/c u": "ask", "wget -q u": "allow"}},
		{"shuf:*", map[string]string{"shuf -o /tmp/x f": "ask", "shuf -n 3 f": "allow"}},
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

// Long options abbreviated (getopt_long, argparse and git take unique prefixes): for every row
// of optionTable, every "--" entry and every prefix of it of three characters or more counts,
// with its value after "=" or in the next word, and a "-name" entry of a longOnly row counts
// abbreviated after one dash (ld -plug). A plain option of the row is the exception.
func TestOptionTableLongOptionsAbbreviated(t *testing.T) {
	concrete := map[string]string{"python[0-9]*": "python3", "perl[0-9]*": "perl5", "ruby[0-9]*": "ruby3",
		"php[0-9]*": "php8", "lua[0-9]*": "lua5", "pypy[0-9]*": "pypy3"}
	n := 0
	for _, r := range optionTable {
		prog := r.programs[0]
		if c, ok := concrete[prog]; ok {
			prog = c
		}
		if prog == "*" {
			prog = "git log" // writingOptions: any program
		}
		if strings.ContainsAny(prog, "*?[") {
			continue
		}
		check := func(list []string, before bool) {
			for _, o := range list {
				long := strings.HasPrefix(o, "--")
				if !long && !(r.longOnly && len(o) > 3 && o[1] != '-') {
					continue
				}
				for k := 3; k <= len(o); k++ {
					abbr := o[:k]
					if !long {
						abbr = o[:k-1] // -plug: one dash, at least two letters
						if k-1 < 3 {
							continue
						}
					}
					if slices.Contains(r.plain, abbr) {
						continue
					}
					for _, form := range []string{abbr + "=x", abbr + " x"} {
						cmd := prog + " " + form + " f"
						rule := prog + ":*"
						if r.sub != "" {
							cmd = prog + " " + r.sub + " " + form + " f"
							rule = prog + " " + r.sub + ":*"
						} else if before {
							cmd = prog + " " + form + " status"
						}
						n++
						set := mustCompile(t, []gate.Rule{{Effect: gate.Allow, Tool: "run_command", Specifier: rule, Scope: gate.ScopeServer}})
						if d := set.Evaluate(commandCall(cmd)); outcome(d) != "ask" {
							t.Errorf("%q under %s: %s (%+v), want ask: %s abbreviates %s", cmd, rule, outcome(d), d, abbr, o)
						}
					}
				}
			}
		}
		check(r.options, false)
		check(r.before, true)
	}
	if n < 500 {
		t.Fatalf("only %d cases", n)
	}
}
