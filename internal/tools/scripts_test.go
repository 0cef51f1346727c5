package tools

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"countersign/internal/tool"
)

// TestCommandScriptsFindsTheWorkspaceScriptsACommandRuns: the scripts run_command's preview binds,
// as the command names them (best effort: literal words only).
func TestCommandScriptsFindsTheWorkspaceScriptsACommandRuns(t *testing.T) {
	for _, tc := range []struct {
		command string
		want    []string
	}{
		{"sh job.sh", []string{"job.sh"}},
		{"bash -e x.sh arg", []string{"x.sh"}},
		{"bash -o pipefail x.sh", []string{"x.sh"}},
		{"dash -- -odd.sh", []string{"-odd.sh"}},
		{"./deploy --prod", []string{"deploy"}},
		{"scripts/build.sh && bin/test", []string{"scripts/build.sh", "bin/test"}},
		{". ./env.sh; source lib/x", []string{"env.sh", "lib/x"}},
		{"python3 tool.py", []string{"tool.py"}},
		{"python3.12 -u -W ignore tool.py", []string{"tool.py"}},
		{"node -r ./setup.js app.js", []string{"app.js"}},
		{"perl -w x.pl; ruby -I lib y.rb; php -f z.php", []string{"x.pl", "y.rb", "z.php"}},
		{"env FOO=1 -u BAR sh job.sh", []string{"job.sh"}},
		{"timeout -s KILL 10 nice -n 5 nohup ./run", []string{"run"}},
		{"sh < job.sh", []string{"job.sh"}},
		{"bash -s < job.sh", []string{"job.sh"}},
		{`sh "job.sh"; sh 'b c.sh'; sh d\ e.sh`, []string{"job.sh", "b c.sh", "d e.sh"}},
		{"cd sub && ./run.sh", []string{"sub/run.sh"}},
		{"(cd sub && ./a.sh); ./b.sh", []string{"sub/a.sh", "b.sh"}},
		{"echo $(sh inner.sh)", []string{"inner.sh"}},
		{"/abs/path/x.sh", []string{"/abs/path/x.sh"}},
		{"sh job.sh; sh ./job.sh", []string{"job.sh"}},
		// Nothing seen: a command string, code, a module, not literal, a program from PATH.
		{"sh -c 'x.sh'", nil},
		{"bash -ec 'x.sh'", nil},
		{"python3 -c 'print(1)' x.py", nil},
		{"python3 -m http.server", nil},
		{"node -e 1", nil},
		{"sh $F", nil},
		{"./$F", nil},
		{"sh *.sh", nil},
		{"go test ./...", nil},
		{"git status", nil},
		{"cd $D && ./x.sh", nil},
		{"sh -c", nil},
		{"if then fi ((", nil},
	} {
		if got := commandScripts(tc.command); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("commandScripts(%q) = %q, want %q", tc.command, got, tc.want)
		}
	}
}

// TestRunCommandApprovedByAPersonRunsOnlyTheScriptsItsPromptShowed (issue 28): run_command's
// preview lists each workspace script with its digest (a missing one as missing; one outside the
// workspace, or a folder, not at all); a call a person approved runs nothing when one changed,
// appeared or vanished since, or when the command (edited) runs a script the prompt did not show.
func TestRunCommandApprovedByAPersonRunsOnlyTheScriptsItsPromptShowed(t *testing.T) {
	rc := mustTools(t, Config{})["run_command"]
	args := func(command string) json.RawMessage {
		b, _ := json.Marshal(map[string]string{"command": command})
		return b
	}
	const job = "echo ran > ran.txt\n"
	for _, tc := range []struct {
		name    string
		command string
		run     string // the command that runs (an edit), when not command
		change  func(t *testing.T, ws string)
		consent func(p *tool.Preview) tool.Consent
		refused string // the error, "" when the command runs
	}{
		{name: "unchanged", command: "sh job.sh"},
		{name: "changed while the call waited", command: "sh job.sh",
			change: func(t *testing.T, ws string) {
				mustWriteFile(t, filepath.Join(ws, "job.sh"), job+"echo sneaky > sneaky.txt\n")
			},
			refused: "job.sh changed on disk after the prompt showed its digest (then sha256 "},
		{name: "removed while the call waited", command: "sh job.sh",
			change:  func(t *testing.T, ws string) { os.Remove(filepath.Join(ws, "job.sh")) },
			refused: ", now missing); nothing ran. Call run_command again to see the new digest."},
		{name: "created after a prompt that showed it missing", command: "sh job.sh; sh later.sh",
			change:  func(t *testing.T, ws string) { mustWriteFile(t, filepath.Join(ws, "later.sh"), "echo later\n") },
			refused: "later.sh changed on disk after the prompt showed its digest (then missing, now sha256 "},
		{name: "an edit that runs another script", command: "sh job.sh", run: "sh other.sh",
			refused: "other.sh: the prompt showed no digest of this script, which the command runs; nothing ran. Call run_command again to see its digest."},
		{name: "an edit that keeps the script", command: "sh job.sh", run: "sh job.sh && echo edited"},
		{name: "changed, but no person approved it (a rule)", command: "sh job.sh",
			change: func(t *testing.T, ws string) {
				mustWriteFile(t, filepath.Join(ws, "job.sh"), job+"echo also > also.txt\n")
			},
			consent: func(*tool.Preview) tool.Consent { return tool.Consent{} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ws := t.TempDir()
			mustWriteFile(t, filepath.Join(ws, "job.sh"), job)
			mustWriteFile(t, filepath.Join(ws, "other.sh"), "echo other > ran.txt\n")
			p, err := rc.Preview(context.Background(), args(tc.command), ws)
			if err != nil || p == nil || len(p.Scripts) == 0 || p.Scripts[0] != (tool.ScriptDigest{Path: "job.sh", Exists: true, SHA256: sha256Hex([]byte(job))}) {
				t.Fatalf("preview %+v, %v; want job.sh with its digest", p, err)
			}
			if tc.change != nil {
				tc.change(t, ws)
			}
			consent := tool.Consent{ByPerson: true, Preview: p}
			if tc.consent != nil {
				consent = tc.consent(p)
			}
			command := tc.command
			if tc.run != "" {
				command = tc.run
			}
			res, err := rc.Execute(context.Background(), args(command), nil, consentContext{fakeContext{ws}, consent})
			_, statErr := os.Stat(filepath.Join(ws, "ran.txt"))
			if tc.refused == "" {
				if err != nil || res.IsError || statErr != nil {
					t.Fatalf("run = %+v, %v (ran.txt: %v); want it run", res, err, statErr)
				}
				return
			}
			if err == nil || !(errors.Is(err, ErrScriptChangedSincePrompt) || errors.Is(err, ErrScriptNotShown)) || !strings.Contains(err.Error(), tc.refused) {
				t.Fatalf("run = %+v, %v; want an error containing %q", res, err, tc.refused)
			}
			if statErr == nil {
				t.Errorf("the command ran: ran.txt exists")
			}
		})
	}

	t.Run("outside the workspace and folders are not listed", func(t *testing.T) {
		root := t.TempDir()
		ws := filepath.Join(root, "ws")
		mustWriteFile(t, filepath.Join(root, "outside.sh"), "echo out\n")
		mustWriteFile(t, filepath.Join(ws, "dir", "keep"), "")
		p, err := rc.Preview(context.Background(), args("sh ../outside.sh; ./dir; sh "+filepath.Join(root, "outside.sh")+"; sh new.sh"), ws)
		want := &tool.Preview{Scripts: []tool.ScriptDigest{{Path: "new.sh"}}}
		if err != nil || !reflect.DeepEqual(p, want) {
			t.Fatalf("preview %+v, %v; want %+v", p, err, want)
		}
		if p, err := rc.Preview(context.Background(), args("git status"), ws); p != nil || err != nil {
			t.Errorf("a command without scripts has preview %+v, %v; want none", p, err)
		}
	})
}
