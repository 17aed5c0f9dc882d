package e2e

import (
	"encoding/base64"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"knotless.dev/knotless/internal/api"
)

// pushRefs pushes refspecs of the work tree and returns the runs of the
// pipelines the push made (one per ref), once there are want runs.
func (w *world) pushRefs(want int, refspecs ...string) []api.Run {
	w.t.Helper()
	before := w.latestPipeline()
	w.git(append([]string{"push", "-q", w.url + "/" + w.repo + ".git"}, refspecs...)...)
	var runs []api.Run
	waitFor(w.t, 15*time.Second, "the push's pipelines", func() (bool, string) {
		runs = runs[:0]
		for _, r := range w.runs(0) {
			if r.Pipeline > before {
				runs = append(runs, r)
			}
		}
		return len(runs) == want, fmt.Sprintf("%d runs in pipelines after %d", len(runs), before)
	})
	return runs
}

// finishedLog waits for run id to succeed and returns step 1's log.
func (w *world) finishedLog(id int64) string {
	w.t.Helper()
	r := w.waitFinal(id, 60*time.Second)
	if r.State != api.StateSucceeded {
		w.t.Fatalf("%s; setup log:\n%s\nstep 1:\n%s", describe(r), w.stepLog(id, api.SetupStep), w.stepLog(id, 1))
	}
	return w.stepLog(id, 1)
}

// vars reads the NAME=VALUE lines of a step's log.
func vars(log string) map[string]string {
	m := map[string]string{}
	for _, line := range strings.Split(log, "\n") {
		if k, v, ok := strings.Cut(line, "="); ok && !strings.ContainsAny(k, " \t") {
			m[k] = v
		}
	}
	return m
}

const describeWorkflow = `on:
  push:
    branches: ["**"]
    tags: ["v*"]
  manual: {}
steps:
  - name: describe
    run: |
      for v in KNOTLESS_REF KNOTLESS_REF_NAME KNOTLESS_REF_TYPE KNOTLESS_BRANCH KNOTLESS_TAG \
               KNOTLESS_EVENT KNOTLESS_BEFORE_SHA KNOTLESS_ACTOR KNOTLESS_SERVER_URL \
               KNOTLESS_RUN_URL KNOTLESS_RUNNER KNOTLESS_RUN KNOTLESS_WORKSPACE TMPDIR; do
        eval "echo $v=\${$v-unset}"
      done
      echo DESCRIBE=$(git describe --tags 2>&1)
      echo HEAD=$(git rev-parse --abbrev-ref HEAD)
      echo AHEAD=$(git log --format=%s origin/main.. | tr '\n' ,)
      echo ORIGIN=$(git config --get remote.origin.url)
      echo CREDENTIALS=$(grep -rlE 'knr_|Authorization' .git/config .git/packed-refs 2>/dev/null | wc -l)
      test -d "$TMPDIR" && echo scratch > "$TMPDIR/scratch" && echo TMPDIR_WRITABLE=yes
`

// Issue 12, items 1 and 2: a run of a pushed tag can `git describe
// --tags`; a branch run is on its branch with origin/* (`git log
// origin/main..` works) and origin naming the repository without a
// credential; steps get the trigger's variables and a TMPDIR of their own
// that goes with the run.
func TestE2E_TagRunDescribesItsTagAndStepsGetTheTriggersVariables(t *testing.T) {
	t.Parallel()
	w := newWorld(t, 5*time.Second)
	w.startRunner(w.registerRunner("r1"))

	// First push of main: no commit before it.
	w.commit(map[string]string{".knotless/workflows/describe.yml": describeWorkflow, "v.txt": "1\n"})
	first := w.git("rev-parse", "HEAD")
	run := w.pushRefs(1, "HEAD:refs/heads/main")[0]
	v := vars(w.finishedLog(run.ID))
	for k, want := range map[string]string{
		"KNOTLESS_REF": "refs/heads/main", "KNOTLESS_REF_NAME": "main", "KNOTLESS_REF_TYPE": "branch",
		"KNOTLESS_BRANCH": "main", "KNOTLESS_TAG": "unset", "KNOTLESS_EVENT": "push", "KNOTLESS_BEFORE_SHA": "unset",
		"KNOTLESS_ACTOR": "admin", "KNOTLESS_SERVER_URL": w.url, "KNOTLESS_RUN_URL": fmt.Sprintf("%s/admin/app/runs/%d", w.url, run.ID),
		"KNOTLESS_RUNNER": "r1", "HEAD": "main", "AHEAD": "", "ORIGIN": w.url + "/admin/app.git", "CREDENTIALS": "0",
		"TMPDIR_WRITABLE": "yes", "DESCRIBE": "fatal: No names found, cannot describe anything.",
	} {
		if v[k] != want {
			t.Errorf("first push of main: %s=%q, want %q", k, v[k], want)
		}
	}
	if tmp := v["TMPDIR"]; tmp == "" || strings.HasPrefix(tmp, v["KNOTLESS_WORKSPACE"]) || tmp == os.TempDir() {
		t.Errorf("TMPDIR=%q: want a directory of the run's own, outside the checkout (%s)", tmp, v["KNOTLESS_WORKSPACE"])
	} else if _, err := os.Stat(tmp); err == nil {
		t.Errorf("TMPDIR %s is still there after the run", tmp)
	}

	// A tag pushed on a second commit: the run describes it.
	w.commit(map[string]string{"v.txt": "2\n"})
	w.git("tag", "-a", "-m", "release", "v9.9.9")
	second := w.git("rev-parse", "HEAD")
	runs := w.pushRefs(2, "HEAD:refs/heads/main", "refs/tags/v9.9.9")
	for _, r := range runs {
		v := vars(w.finishedLog(r.ID))
		switch r.Ref {
		case "refs/heads/main":
			if v["KNOTLESS_BEFORE_SHA"] != first || v["DESCRIBE"] != "v9.9.9" || v["HEAD"] != "main" {
				t.Errorf("second push of main: BEFORE_SHA=%q (want %s) DESCRIBE=%q HEAD=%q", v["KNOTLESS_BEFORE_SHA"], first, v["DESCRIBE"], v["HEAD"])
			}
		case "refs/tags/v9.9.9":
			for k, want := range map[string]string{
				"DESCRIBE": "v9.9.9", "KNOTLESS_REF_NAME": "v9.9.9", "KNOTLESS_REF_TYPE": "tag", "KNOTLESS_TAG": "v9.9.9",
				"KNOTLESS_BRANCH": "unset", "KNOTLESS_EVENT": "tag", "HEAD": "HEAD", "CREDENTIALS": "0",
			} {
				if v[k] != want {
					t.Errorf("tag run: %s=%q, want %q", k, v[k], want)
				}
			}
		default:
			t.Errorf("unexpected run of %s", r.Ref)
		}
		if r.SHA != second {
			t.Errorf("run %d of %s at %s, want %s", r.ID, r.Ref, r.SHA, second)
		}
	}

	// A feature branch: origin/main is there, so origin/main.. is the branch's own commits.
	w.git("checkout", "-q", "-b", "feature/x")
	w.commit(map[string]string{"v.txt": "3\n"})
	w.git("commit", "-q", "--allow-empty", "-m", "feature work")
	run = w.pushRefs(1, "HEAD:refs/heads/feature/x")[0]
	v = vars(w.finishedLog(run.ID))
	if v["HEAD"] != "feature/x" || v["AHEAD"] != "feature work,e2e change," || v["KNOTLESS_REF_NAME"] != "feature/x" ||
		v["DESCRIBE"] != "v9.9.9-2-g"+run.SHA[:7] {
		t.Errorf("feature branch run: HEAD=%q AHEAD=%q REF_NAME=%q DESCRIBE=%q", v["HEAD"], v["AHEAD"], v["KNOTLESS_REF_NAME"], v["DESCRIBE"])
	}

	// A manual trigger: event manual, no commit before, the trigger's actor.
	before := w.latestPipeline()
	w.cliOK("", "run", "trigger", "--repo", w.repo, "--ref", "main")
	waitFor(t, 15*time.Second, "the trigger's pipeline", func() (bool, string) { return w.latestPipeline() > before, "" })
	run = w.runs(w.latestPipeline())[0]
	v = vars(w.finishedLog(run.ID))
	if v["KNOTLESS_EVENT"] != "manual" || v["KNOTLESS_BEFORE_SHA"] != "unset" || v["KNOTLESS_ACTOR"] != "admin" || v["HEAD"] != "main" {
		t.Errorf("manual run: EVENT=%q BEFORE_SHA=%q ACTOR=%q HEAD=%q", v["KNOTLESS_EVENT"], v["KNOTLESS_BEFORE_SHA"], v["KNOTLESS_ACTOR"], v["HEAD"])
	}
}

// gitIn runs git in dir with the world's environment (author, admin token).
func (w *world) gitIn(dir string, args ...string) string {
	w.t.Helper()
	cmd := exec.Command("git", append([]string{"-C", dir}, args...)...)
	cmd.Env = w.gitEnv()
	out, err := cmd.CombinedOutput()
	if err != nil {
		w.t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

// newRepo creates OWNER/NAME on the server (as the account of token, the
// admin's when ""), with one commit of files pushed to main; it returns
// the commit.
func (w *world) newRepo(full, token string, files map[string]string) string {
	w.t.Helper()
	dir := filepath.Join(w.root, strings.ReplaceAll(full, "/", "-"))
	if token == "" {
		token = w.token
	}
	res := w.cliAs(token, "repo", "create", full)
	if res.code != 0 {
		w.t.Fatalf("repo create %s: exit %d\n%s%s", full, res.code, res.stdout, res.stderr)
	}
	w.gitIn(w.root, "init", "-q", "-b", "main", dir)
	for p, c := range files {
		if err := os.WriteFile(filepath.Join(dir, p), []byte(c), 0o644); err != nil {
			w.t.Fatal(err)
		}
	}
	w.gitIn(dir, "add", "-A")
	w.gitIn(dir, "commit", "-q", "-m", "first")
	cmd := exec.Command("git", "-C", dir, "push", "-q", w.url+"/"+full+".git", "HEAD:refs/heads/main")
	// The last GIT_CONFIG_* entries win (os/exec keeps the last of a name).
	cmd.Env = append(w.gitEnv(), "GIT_CONFIG_COUNT=1", "GIT_CONFIG_KEY_0=http.extraHeader",
		"GIT_CONFIG_VALUE_0=Authorization: Basic "+base64.StdEncoding.EncodeToString([]byte("x:"+token)))
	if out, err := cmd.CombinedOutput(); err != nil {
		w.t.Fatalf("push %s: %v\n%s", full, err, out)
	}
	return w.gitIn(dir, "rev-parse", "HEAD")
}

// cliAs runs the CLI with the API token of another account.
func (w *world) cliAs(token string, args ...string) cliResult {
	w.t.Helper()
	saved := w.token
	w.token = token
	defer func() { w.token = saved }()
	return w.cli("", args...)
}

// createAccount makes an account (not an admin) and returns its token.
func (w *world) createAccount(handle string) string {
	w.t.Helper()
	out := w.cliOK("", "account", "create", handle, "--json")
	i := strings.Index(out, `"token": "`)
	if i < 0 {
		w.t.Fatalf("account create --json:\n%s", out)
	}
	tok := out[i+len(`"token": "`):]
	return tok[:strings.Index(tok, `"`)]
}
