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
	"knotless.dev/knotless/internal/testenv"
	"knotless.dev/knotless/internal/testwait"
)

// pushRefs pushes refspecs of the work tree and returns the runs of the
// pipelines the push made (one per ref), once there are want runs.
func (w *world) pushRefs(want int, refspecs ...string) []api.Run {
	w.t.Helper()
	before := w.latestPipeline()
	w.git(append([]string{"push", "-q", w.url + "/" + w.repo + ".git"}, refspecs...)...)
	var runs []api.Run
	testwait.Until(w.t, 15*time.Second, "the push's pipelines", func() (bool, string) {
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
	return w.finishedLogWithin(id, 60*time.Second)
}

// finishedLogWithin is finishedLog waiting up to d.
func (w *world) finishedLogWithin(id int64, d time.Duration) string {
	w.t.Helper()
	r := w.waitFinal(id, d)
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
		"KNOTLESS_ACTOR": "admin", "KNOTLESS_SERVER_URL": w.url, "KNOTLESS_RUN_URL": fmt.Sprintf("%s/-/runs/%d", w.url, run.ID),
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
	testwait.Until(t, 15*time.Second, "the trigger's pipeline", func() (bool, string) { return w.latestPipeline() > before, "" })
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

// Issue 12, item 3: submodules on the same server, by a relative and an
// absolute URL, are checked out with the run's token, which is never
// written into the checkout; a submodule of another account's repository
// is refused, and the run says why.
func TestE2E_SubmodulesOfTheOwnerAreCheckedOutAndAnotherAccountsAreRefused(t *testing.T) {
	t.Parallel()
	w := newWorld(t, 5*time.Second)
	w.startRunner(w.registerRunner("r1"))
	libSHA := w.newRepo("admin/lib", "", map[string]string{"lib.txt": "lib at work\n"})
	bob := w.createAccount("bob")
	privateSHA := w.newRepo("bob/private", bob, map[string]string{"secret.txt": "bob's\n"})

	files := map[string]string{
		".knotless/workflows/sub.yml": `checkout: {submodules: true}
steps:
  - run: |
      cat lib/lib.txt abs/lib.txt
      git submodule status
      echo CREDENTIALS=$(grep -rlE 'knr_|Authorization' .git/config .gitmodules lib/.git/config abs/.git/config | wc -l)
`,
	}
	for p, c := range files {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(w.src, p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(w.src, p), []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	addSub := func(path, url, sha string) {
		w.git("config", "--file", ".gitmodules", "submodule."+path+".path", path)
		w.git("config", "--file", ".gitmodules", "submodule."+path+".url", url)
		w.git("update-index", "--add", "--cacheinfo", "160000,"+sha+","+path)
	}
	addSub("lib", "../lib.git", libSHA)
	addSub("abs", w.url+"/admin/lib.git", libSHA)
	w.git("add", ".gitmodules", ".knotless")
	w.git("commit", "-q", "-m", "submodules")
	run := w.pushRefs(1, "HEAD:refs/heads/main")[0]
	log := w.finishedLog(run.ID)
	if strings.Count(log, "lib at work\n") != 2 || !strings.Contains(log, " "+libSHA+" lib ") || !strings.Contains(log, "CREDENTIALS=0") {
		t.Errorf("step log:\n%s", log)
	}
	if setup := w.stepLog(run.ID, api.SetupStep); !strings.Contains(setup, "submodule lib: "+w.url+"/admin/lib.git at "+libSHA) {
		t.Errorf("setup log does not say which submodule it checked out:\n%s", setup)
	}

	// Another account's repository: refused, and the run says why.
	addSub("private", w.url+"/bob/private.git", privateSHA)
	w.git("add", ".gitmodules")
	w.git("commit", "-q", "-m", "bob's submodule")
	run = w.pushRefs(1, "HEAD:refs/heads/main")[0]
	r := w.waitFinal(run.ID, 60*time.Second)
	want := "no repository bob/private for a run of admin/app: a run may fetch only repositories of admin"
	if r.State != api.StateErrored || r.Reason != api.ReasonCheckout || !strings.Contains(r.Message, want) || !strings.Contains(r.Message, "submodule private") {
		t.Errorf("%s, want errored/checkout saying %q", describe(r), want)
	}
	if setup := w.stepLog(run.ID, api.SetupStep); !strings.Contains(setup, want) {
		t.Errorf("setup log does not say why:\n%s", setup)
	}
}

// Issue 12, item 4: the workspace's path is the same for every run of a
// repository's workflow, so Go's test cache (in XDG_CACHE_HOME, which the
// operator keeps across runs with --env) hits on the second run of the
// same commit.
func TestE2E_GoTestCacheHitsOnTheSecondRunOfTheSameCommit(t *testing.T) {
	t.Parallel()
	if _, err := os.Stat("/usr/local/go/bin/go"); err != nil {
		testenv.Skipf(t, "no Go at /usr/local/go")
	}
	w := newWorld(t, 5*time.Second)
	w.startRunner(w.registerRunner("r1"), "--env", "XDG_CACHE_HOME="+filepath.Join(w.root, "cache"))
	run := w.pushOne(map[string]string{
		"go.mod":    "module example.com/m\n\ngo 1.21\n",
		"m.go":      "package m\n\nfunc Add(a, b int) int { return a + b }\n",
		"m_test.go": "package m\n\nimport \"testing\"\n\nfunc TestAdd(t *testing.T) {\n\tif Add(1, 2) != 3 {\n\t\tt.Fatal(\"no\")\n\t}\n}\n",
		".knotless/workflows/test.yml": `on: {push: {}, manual: {}}
env:
  PATH: /usr/local/go/bin:/usr/bin:/bin
  GOTOOLCHAIN: local
  GOFLAGS: -buildvcs=false
steps:
  - run: |
      echo WORKSPACE=$KNOTLESS_WORKSPACE
      go test ./...
`,
	})
	// The first run compiles the test's dependencies into the empty cache.
	first := w.finishedLogWithin(run.ID, 10*time.Minute)
	if strings.Contains(first, "(cached)") {
		t.Fatalf("the first run hit a cache:\n%s", first)
	}
	before := w.latestPipeline()
	w.cliOK("", "run", "trigger", "--repo", w.repo, "--ref", "main")
	testwait.Until(t, 15*time.Second, "the trigger's pipeline", func() (bool, string) { return w.latestPipeline() > before, "" })
	second := w.finishedLogWithin(w.runs(w.latestPipeline())[0].ID, 5*time.Minute)
	if !strings.Contains(second, "ok  \texample.com/m\t(cached)") {
		t.Errorf("second run of the same commit: go test did not hit its cache:\n%s", second)
	}
	if vars(first)["WORKSPACE"] != vars(second)["WORKSPACE"] {
		t.Errorf("workspace moved: %s, then %s", vars(first)["WORKSPACE"], vars(second)["WORKSPACE"])
	}
}

// Issue 12, item 1 on kube: the checkout copied into the job pod holds the
// tags and the history (the pod's .git, collected as an output, describes
// the tag on the runner's host), and TMPDIR is the pod's /tmp.
func TestE2E_KubeTagRunsCheckoutArrivesInThePodWithTagsAndHistory(t *testing.T) {
	t.Parallel()
	k := newKubeRunner(t)
	w := newWorld(t, 30*time.Second)
	w.startRunner(w.registerRunner("kr1"), k.args...)
	w.commit(map[string]string{"v.txt": "1\n"})
	w.git("tag", "-a", "-m", "old", "v1.0.0")
	w.commit(map[string]string{"v.txt": "2\n", ".knotless/workflows/release.yml": `on:
  push: {branches: [], tags: ["v*"]}
outputs: [.git/]
steps:
  - run: |
      echo TMPDIR=$TMPDIR REF_NAME=$KNOTLESS_REF_NAME REF_TYPE=$KNOTLESS_REF_TYPE
      echo scratch > "$TMPDIR/x" && echo TMPDIR_WRITABLE=yes
`})
	w.git("tag", "-a", "-m", "release", "v9.9.9")
	run := w.pushRefs(1, "HEAD:refs/heads/main", "refs/tags/v1.0.0", "refs/tags/v9.9.9")[0]
	log := w.finishedLogWithin(run.ID, 3*time.Minute)
	if !strings.Contains(log, "TMPDIR=/tmp REF_NAME=v9.9.9 REF_TYPE=tag\nTMPDIR_WRITABLE=yes\n") {
		t.Errorf("step log:\n%s", log)
	}
	dst := filepath.Join(w.root, "got")
	w.cliOK("", "run", "outputs", itoa(run.ID), "-o", dst)
	gitDir := filepath.Join(dst, ".git")
	if got := w.gitIn(w.root, "--git-dir", gitDir, "describe", "--tags"); got != "v9.9.9" {
		t.Errorf("the pod's checkout describes as %q, want v9.9.9", got)
	}
	if got := w.gitIn(w.root, "--git-dir", gitDir, "rev-list", "--count", "HEAD"); got != "2" {
		t.Errorf("the pod's checkout holds %s commits, want 2", got)
	}
	if got := w.gitIn(w.root, "--git-dir", gitDir, "describe", "HEAD~1"); got != "v1.0.0" {
		t.Errorf("the pod's checkout: git describe HEAD~1 = %q, want v1.0.0", got)
	}
}
