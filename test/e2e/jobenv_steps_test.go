package e2e

import (
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/testenv"
	"knotless.dev/knotless/internal/testwait"
)

// The runner's own environment does not leak into steps; --env-pass (and
// its KNOTLESS_ENV_PASS form) passes named variables with the runner's
// values; LANG and TZ have defaults that --env and the workflow's env
// override, in the documented order.
func TestE2E_EnvPassGivesProxyVariablesAndNothingElseLeaks(t *testing.T) {
	t.Parallel()
	w := newWorld(t, 5*time.Second)
	r := w.registerRunner("r1")
	env := append(baseEnv(w.home),
		"HTTPS_PROXY=http://proxy.example:3128", "NO_PROXY=.internal,localhost",
		"RUNNER_ONLY=must-not-leak", "KNOTLESS_ENV_PASS=HTTPS_PROXY, NO_PROXY")
	args := []string{"run", "--state", r.state, "--executor", "shell", "--work", r.work,
		"--env", "GATE=" + w.gate, "--env", w.tag, "--env", "TZ=Europe/Berlin"}
	startProc(t, "knotless-run", env, w.root, runnerBin(), args...)

	run := w.pushOne(map[string]string{".knotless/workflows/ci.yml": `on:
  push: {}
env:
  LANG: en_US.UTF-8
steps:
  - run: |
      echo "https_proxy=${HTTPS_PROXY-unset}"
      echo "no_proxy=${NO_PROXY-unset}"
      echo "runner_only=${RUNNER_ONLY-unset}"
      echo "lang=$LANG tz=$TZ"
  - env: {TZ: Asia/Tokyo}
    run: echo "step tz=$TZ"
`})
	fin := w.waitFinal(run.ID, 60*time.Second)
	if fin.State != api.StateSucceeded {
		t.Fatalf("run: %s", describe(fin))
	}
	log := w.stepLog(run.ID, 1)
	for _, want := range []string{"https_proxy=http://proxy.example:3128", "no_proxy=.internal,localhost",
		"runner_only=unset", "lang=en_US.UTF-8 tz=Europe/Berlin"} {
		if !strings.Contains(log, want) {
			t.Errorf("step 1 log lacks %q:\n%s", want, log)
		}
	}
	if log := w.stepLog(run.ID, 2); !strings.Contains(log, "step tz=Asia/Tokyo") {
		t.Errorf("step 2: the step's env should win over --env:\n%s", log)
	}
}

// Without --env or the workflow, LANG and TZ default to C.UTF-8 and UTC.
func TestE2E_StepsGetLangAndTZDefaults(t *testing.T) {
	t.Parallel()
	w := newWorld(t, 5*time.Second)
	w.startRunner(w.registerRunner("r1"))
	run := w.pushOne(map[string]string{".knotless/workflows/ci.yml": `on:
  push: {}
steps:
  - run: echo "lang=$LANG tz=$TZ"
`})
	fin := w.waitFinal(run.ID, 60*time.Second)
	if log := w.stepLog(run.ID, 1); fin.State != api.StateSucceeded || !strings.Contains(log, "lang=C.UTF-8 tz=UTC") {
		t.Fatalf("run %s; log:\n%s", describe(fin), log)
	}
}

// `knotless run show --json` has each step's start, end and duration as
// the runner measured them, the table shows them, and `run logs` footers
// end with the duration.
func TestE2E_StepTimingsInRunShowAndLogFooters(t *testing.T) {
	t.Parallel()
	w := newWorld(t, 5*time.Second)
	w.startRunner(w.registerRunner("r1"))
	run := w.pushOne(map[string]string{".knotless/workflows/ci.yml": `on:
  push: {}
steps:
  - name: nap
    run: sleep 0.4
  - name: quick
    run: "true"
`})
	if fin := w.waitFinal(run.ID, 60*time.Second); fin.State != api.StateSucceeded {
		t.Fatalf("run: %s", describe(fin))
	}
	var shown api.Run
	if err := json.Unmarshal([]byte(w.cliOK("", "run", "show", strconv.FormatInt(run.ID, 10), "--json")), &shown); err != nil {
		t.Fatal(err)
	}
	var prevEnd time.Time
	for _, st := range shown.Steps {
		if st.StartedAt == nil || st.FinishedAt == nil || st.DurationMS == nil {
			t.Fatalf("step %d (%s) has no times: %+v", st.Index, st.Name, st)
		}
		if st.StartedAt.Before(prevEnd) || st.FinishedAt.Before(*st.StartedAt) {
			t.Errorf("step %d: %s..%s overlaps the step before (ended %s)", st.Index, st.StartedAt, st.FinishedAt, prevEnd)
		}
		prevEnd = *st.FinishedAt
		if st.Name == "nap" && *st.DurationMS < 400 {
			t.Errorf("step nap took %d ms by the server's record; it sleeps 400 ms", *st.DurationMS)
		}
	}
	table := w.cliOK("", "run", "show", strconv.FormatInt(run.ID, 10))
	if !strings.Contains(table, "DURATION") || !regexp.MustCompile(`nap\s+succeeded\s+0\s+\d\d:\d\d:\d\d\.\d+\s+\d\d:\d\d:\d\d\.\d+\s+\d+(ms|s|\.\d+s)`).MatchString(table) {
		t.Errorf("run show table lacks the step's times:\n%s", table)
	}
	logs := w.cliOK("", "run", "logs", strconv.FormatInt(run.ID, 10))
	if !regexp.MustCompile(`── step 1/2: nap ──\n── succeeded, exit 0, (4\d\dms|[4-9]\d\dms|\d+(\.\d+)?s) ──\n`).MatchString(logs) {
		t.Errorf("run logs footer lacks the duration:\n%s", logs)
	}
}

// serviceWorkflow serves www/ over HTTP on port from a detached step and
// fetches it from the two steps after it (the first step's end must not
// kill the service).
func serviceWorkflow(port int) string {
	return fmt.Sprintf(`on:
  push: {}
steps:
  - name: content
    run: |
      mkdir -p www && echo hello-from-the-service > www/index.html
      echo "env: $LANG $TZ ${HTTPS_PROXY-unset}"
  - name: web
    detach: true
    run: |
      echo "service starting on %[1]d"
      exec busybox httpd -f -v -p 127.0.0.1:%[1]d -h www
  - name: fetch
    run: |
      i=0
      until busybox wget -q -O - http://127.0.0.1:%[1]d/index.html 2>/dev/null; do
        i=$((i+1)); [ $i -lt 100 ] || exit 7; sleep 0.1
      done
  - name: again
    run: busybox wget -q -O - http://127.0.0.1:%[1]d/index.html
`, port)
}

// checkServiceRun checks a finished run of serviceWorkflow: the detached
// step's own log (its output and how it ended), the later steps' answers.
func checkServiceRun(t *testing.T, w *world, id int64, runnerOut func() string) {
	t.Helper()
	fin := w.waitFinal(id, 3*time.Minute)
	if fin.State != api.StateSucceeded {
		t.Fatalf("run %s; runner:\n%s\nsetup:\n%s\nweb:\n%s\nfetch:\n%s", describe(fin), runnerOut(), w.stepLog(id, 0), w.stepLog(id, 2), w.stepLog(id, 3))
	}
	for _, step := range []int{3, 4} {
		if got := w.stepLog(id, step); got != "hello-from-the-service\n" {
			t.Errorf("step %d log %q, want the service's answer", step, got)
		}
	}
	web := w.stepLog(id, 2)
	for _, want := range []string{"service starting on", "[knotless: detached step stopped at the run's end]"} {
		if !strings.Contains(web, want) {
			t.Errorf("the detached step's log lacks %q:\n%s", want, web)
		}
	}
	r := w.run(id)
	for _, st := range r.Steps {
		if st.Index == 2 && (st.State != api.StepSucceeded || st.StartedAt == nil || st.FinishedAt == nil) {
			t.Errorf("detached step: %+v, want succeeded with times", st)
		}
	}
	logs := w.cliOK("", "run", "logs", strconv.FormatInt(id, 10))
	if !strings.Contains(logs, "── step 2/4: web ──\nservice starting on") {
		t.Errorf("run logs lacks the detached step's log:\n%s", logs)
	}
}

// A detached step (`detach: true`) keeps serving beside the next steps on
// the shell executor, has its own log, and is stopped at the run's end:
// no process of it is left.
func TestE2E_DetachedServiceAnswersTheNextSteps(t *testing.T) {
	t.Parallel()
	w := newWorld(t, 5*time.Second)
	runner := w.startRunner(w.registerRunner("r1"))
	port := 20000 + int(time.Now().UnixNano()%20000)
	run := w.pushOne(map[string]string{".knotless/workflows/ci.yml": serviceWorkflow(port)})
	checkServiceRun(t, w, run.ID, runner.output)
	if pids := pidsWithArg(fmt.Sprintf("127.0.0.1:%d", port)); len(pids) > 0 {
		t.Errorf("the service's processes outlived the run: %v", pids)
	}
}

// A detached step that exits non-zero before the run's end fails: the step
// shows failed with its exit code, the run fails, later steps are skipped.
func TestE2E_DetachedServiceThatExitsFailsTheRun(t *testing.T) {
	t.Parallel()
	w := newWorld(t, 5*time.Second)
	w.startRunner(w.registerRunner("r1"))
	run := w.pushOne(map[string]string{".knotless/workflows/ci.yml": `on:
  push: {}
steps:
  - name: db
    detach: true
    run: |
      echo "db: cannot start"
      touch "$GATE/db-exited"
      exit 3
  - name: wait
    run: while [ ! -e "$GATE/db-exited" ]; do sleep 0.05; done; sleep 0.5
  - name: test
    run: echo never
`})
	fin := w.waitFinal(run.ID, 60*time.Second)
	if fin.State != api.StateFailed || fin.Reason != api.ReasonExitCode || !strings.Contains(fin.Message, "db") {
		t.Fatalf("run %s, want failed/exit-code naming the detached step", describe(fin))
	}
	states := map[int]api.Step{}
	for _, st := range fin.Steps {
		states[st.Index] = st
	}
	if db := states[1]; db.State != api.StepFailed || db.ExitCode == nil || *db.ExitCode != 3 {
		t.Errorf("detached step: %+v, want failed, exit 3", db)
	}
	if st := states[3]; st.State != api.StepSkipped {
		t.Errorf("step after the failure: %+v, want skipped", st)
	}
	if log := w.stepLog(run.ID, 1); !strings.Contains(log, "db: cannot start") || !strings.Contains(log, "ended before the run's end, exit 3") {
		t.Errorf("detached step's log:\n%s", log)
	}
}

// The kube executor honours `detach: true` through the same step agent:
// the service in the job pod answers the next steps and is stopped at
// the run's end.
func TestE2E_KubeDetachedServiceAnswersTheNextSteps(t *testing.T) {
	t.Parallel()
	k := newKubeRunner(t)
	w := newWorld(t, 30*time.Second)
	r := w.registerRunner("kr1")
	// --env-pass and the LANG/TZ defaults reach a pod's steps too.
	args := append([]string{"run", "--state", r.state, "--work", r.work, "--env-pass", "HTTPS_PROXY"}, k.args...)
	runner := startProc(t, "knotless-run", append(baseEnv(w.home), "HTTPS_PROXY=http://proxy.example:3128"), w.root, runnerBin(), args...)
	run := w.pushOne(map[string]string{".knotless/workflows/ci.yml": serviceWorkflow(8080)})
	checkServiceRun(t, w, run.ID, runner.output)
	if got := w.stepLog(run.ID, 1); got != "env: C.UTF-8 UTC http://proxy.example:3128\n" {
		t.Errorf("step 1 in the pod: %q, want the LANG/TZ defaults and the passed HTTPS_PROXY", got)
	}
}

// concurrencyWorkflow holds each run at its step until the test releases
// it ($GATE/release-RUN), in one concurrency group per workflow and ref.
func concurrencyWorkflow(cancel bool) string {
	return fmt.Sprintf(`on:
  push: {}
concurrency:
  group: "{{ workflow }}-{{ ref }}"
  cancel-in-progress: %t
steps:
  - name: hold
    run: |
      touch "$GATE/started-$KNOTLESS_RUN"
      while [ ! -e "$GATE/release-$KNOTLESS_RUN" ]; do sleep 0.05; done
`, cancel)
}

// A second push to a busy branch cancels the first run under
// cancel-in-progress: the first ends cancelled/superseded, naming the
// second, which then runs.
func TestE2E_ConcurrencyCancelInProgressSupersedesTheBusyRun(t *testing.T) {
	t.Parallel()
	w := newWorld(t, 5*time.Second)
	w.startRunner(w.registerRunner("r1"), "--capacity", "2")
	first := w.pushOne(map[string]string{".knotless/workflows/ci.yml": concurrencyWorkflow(true), "v": "1"})
	w.waitGate(first.ID, fmt.Sprintf("started-%d", first.ID), 60*time.Second)
	second := w.pushOne(map[string]string{"v": "2"})
	fin := w.waitFinal(first.ID, 60*time.Second)
	if fin.State != api.StateCancelled || fin.Reason != api.ReasonSuperseded || !strings.Contains(fin.Message, fmt.Sprintf("run %d", second.ID)) {
		t.Fatalf("first run: %s, want cancelled/superseded by run %d", describe(fin), second.ID)
	}
	if fin.ConcurrencyGroup != "ci-refs/heads/main" {
		t.Errorf("first run's group %q, want ci-refs/heads/main", fin.ConcurrencyGroup)
	}
	w.waitGate(second.ID, fmt.Sprintf("started-%d", second.ID), 60*time.Second)
	w.openGate(fmt.Sprintf("release-%d", second.ID))
	if fin := w.waitFinal(second.ID, 60*time.Second); fin.State != api.StateSucceeded {
		t.Fatalf("second run: %s", describe(fin))
	}
}

// Without cancel-in-progress the second run of the group queues behind the
// first, although the runner has room for both, says why, and runs once
// the first has ended.
func TestE2E_ConcurrencyGroupQueuesTheNewRunBehindTheBusyOne(t *testing.T) {
	t.Parallel()
	w := newWorld(t, 5*time.Second)
	w.startRunner(w.registerRunner("r1"), "--capacity", "2")
	first := w.pushOne(map[string]string{".knotless/workflows/ci.yml": concurrencyWorkflow(false), "v": "1"})
	w.waitGate(first.ID, fmt.Sprintf("started-%d", first.ID), 60*time.Second)
	second := w.pushOne(map[string]string{"v": "2"})
	want := fmt.Sprintf("waiting for run %d to end", first.ID)
	w.waitRun(second.ID, 30*time.Second, "the second run to say it waits for the first", func(r api.Run) bool {
		return r.State == api.StateQueued && strings.Contains(r.Message, want)
	})
	show := w.cliOK("", "run", "show", strconv.FormatInt(second.ID, 10))
	if !strings.Contains(show, want) || !strings.Contains(show, "ci-refs/heads/main") {
		t.Errorf("run show of the waiting run:\n%s", show)
	}
	if fileExists(filepath.Join(w.gate, fmt.Sprintf("started-%d", second.ID))) {
		t.Fatal("the second run started while the first of its group ran")
	}
	w.openGate(fmt.Sprintf("release-%d", first.ID))
	if fin := w.waitFinal(first.ID, 60*time.Second); fin.State != api.StateSucceeded {
		t.Fatalf("first run: %s", describe(fin))
	}
	w.waitGate(second.ID, fmt.Sprintf("started-%d", second.ID), 60*time.Second)
	w.openGate(fmt.Sprintf("release-%d", second.ID))
	if fin := w.waitFinal(second.ID, 60*time.Second); fin.State != api.StateSucceeded {
		t.Fatalf("second run: %s", describe(fin))
	}
}

// A root runner with --user nobody runs every step as nobody (its groups,
// USER, a HOME of its own): a 0400 file is unwritable to the step, root's
// files are unreadable, git works in the workspace, and what the steps
// leave (a 0000 directory, read-only files) is removed with the workspace
// after the run; the runner's mirror stays root's.
func TestE2E_RootRunnerWithUserRunsStepsUnprivileged(t *testing.T) {
	if os.Geteuid() != 0 {
		testenv.Skipf(t, "needs root: the runner must run as root to run steps as another user")
	}
	t.Parallel()
	w := newWorld(t, 5*time.Second)
	r := w.registerRunner("r1")
	// t.TempDir's directories are 0700: let nobody reach the work directory.
	for d := w.root; d != "/" && d != os.TempDir(); d = filepath.Dir(d) {
		if err := os.Chmod(d, 0o711); err != nil {
			t.Fatal(err)
		}
	}
	runner := w.startRunner(r, "--user", "nobody")
	run := w.pushOne(map[string]string{"data.txt": "checked out\n", ".knotless/workflows/ci.yml": `on:
  push: {}
steps:
  - name: who
    run: |
      echo "uid=$(id -u) user=$USER"
      touch "$HOME/mine" && echo "home writable"
      cat data.txt
  - name: read-only
    run: |
      echo data > ro.txt
      chmod 0400 ro.txt
      if (echo more >> ro.txt) 2>/dev/null; then echo "0400 file WRITABLE"; exit 1; fi
      echo "0400 file unwritable"
      if cat /etc/shadow >/dev/null 2>&1; then echo "root's file READABLE"; exit 1; fi
      git status --short >/dev/null && echo "git works"
  - name: leave-a-mess
    run: |
      mkdir -p locked/sub && touch locked/sub/f locked/g && chmod 0444 locked/g
      chmod 000 locked/sub locked
`})
	fin := w.waitFinal(run.ID, 60*time.Second)
	if fin.State != api.StateSucceeded {
		t.Fatalf("run %s\nrunner:\n%s\nsetup:\n%s\nstep 1:\n%s\nstep 2:\n%s", describe(fin), runner.output(), w.stepLog(run.ID, 0), w.stepLog(run.ID, 1), w.stepLog(run.ID, 2))
	}
	if got := w.stepLog(run.ID, 1); got != "uid=65534 user=nobody\nhome writable\nchecked out\n" {
		t.Errorf("step 1: %q", got)
	}
	if got := w.stepLog(run.ID, 2); got != "0400 file unwritable\ngit works\n" {
		t.Errorf("step 2: %q", got)
	}
	if setup := w.stepLog(run.ID, 0); !strings.Contains(setup, "as user nobody (uid 65534") {
		t.Errorf("setup log does not say which user runs the steps:\n%s", setup)
	}
	testwait.Until(t, 30*time.Second, "the run's workspace to be removed", func() (bool, string) {
		_, err := os.Lstat(filepath.Join(r.work, "runs", strconv.FormatInt(run.ID, 10)))
		return os.IsNotExist(err), fmt.Sprint(err)
	})
	_ = filepath.WalkDir(filepath.Join(r.work, "mirrors"), func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if fi, err := d.Info(); err == nil {
			if st, ok := fi.Sys().(*syscall.Stat_t); ok && st.Uid != 0 {
				t.Errorf("the mirror's %s belongs to uid %d, not root", p, st.Uid)
				return filepath.SkipAll
			}
		}
		return nil
	})
}

// A runner killed while a detached step serves and a later step runs: the
// runner that takes the run over keeps the service (it was started before),
// the step after the held one still reaches it, and the service is stopped
// at the run's end with its whole log.
func TestE2E_RunnerKilledWhileAServiceRunsTakesTheServiceOver(t *testing.T) {
	t.Parallel()
	w := newWorld(t, 30*time.Second)
	rid := w.registerRunner("r1")
	first := w.startRunner(rid)
	port := 20000 + int((time.Now().UnixNano()/7)%20000)
	run := w.pushOne(map[string]string{"www/index.html": "served across a restart\n", ".knotless/workflows/ci.yml": fmt.Sprintf(`on:
  push: {}
steps:
  - name: web
    detach: true
    run: exec busybox httpd -f -p 127.0.0.1:%[1]d -h www
  - name: hold
    run: |
      touch "$GATE/held"
      while [ ! -e "$GATE/go" ]; do sleep 0.05; done
  - name: fetch
    run: busybox wget -q -O - http://127.0.0.1:%[1]d/index.html
`, port)})
	w.waitGate(run.ID, "held", 60*time.Second)
	first.signal(t, syscall.SIGKILL)
	first.wait(t, 10*time.Second)
	second := w.startRunner(rid)
	testwait.Until(t, 30*time.Second, "the new runner to take the run over", func() (bool, string) {
		return strings.Contains(second.output(), "taking over a run"), ""
	})
	w.openGate("go")
	fin := w.waitFinal(run.ID, 60*time.Second)
	if fin.State != api.StateSucceeded {
		t.Fatalf("run %s\nrunner:\n%s\nfetch:\n%s", describe(fin), second.output(), w.stepLog(run.ID, 3))
	}
	if got := w.stepLog(run.ID, 3); got != "served across a restart\n" {
		t.Errorf("fetch after the takeover: %q", got)
	}
	if got := w.stepLog(run.ID, 1); !strings.Contains(got, "[knotless: detached step stopped at the run's end]") {
		t.Errorf("the service's log: %q", got)
	}
	if pids := pidsWithArg(fmt.Sprintf("127.0.0.1:%d", port)); len(pids) > 0 {
		t.Errorf("the service outlived the run: %v", pids)
	}
}

// `knotless run logs -f` does not wait for a detached step before showing
// the steps after it: it says the step runs beside them, follows them
// live, and prints the detached step's log once the run has ended.
func TestE2E_RunLogsFollowShowsLaterStepsWhileADetachedStepRuns(t *testing.T) {
	t.Parallel()
	w := newWorld(t, 5*time.Second)
	w.startRunner(w.registerRunner("r1"))
	run := w.pushOne(map[string]string{".knotless/workflows/ci.yml": `on:
  push: {}
steps:
  - name: svc
    detach: true
    run: echo "service up"; exec sleep 600
  - name: hold
    run: |
      echo "hold is live"
      touch "$GATE/held"
      while [ ! -e "$GATE/go" ]; do sleep 0.05; done
`})
	w.waitGate(run.ID, "held", 60*time.Second)
	follow := startProc(t, "knotless run logs -f", append(baseEnv(w.home), "XDG_CONFIG_HOME="+filepath.Join(w.home, ".config"),
		"KNOTLESS_SERVER="+w.url, "KNOTLESS_TOKEN="+w.token), w.src, cliBin(), "run", "logs", strconv.FormatInt(run.ID, 10), "-f")
	testwait.Until(t, 60*time.Second, "run logs -f to show the step after the detached one", func() (bool, string) {
		return strings.Contains(follow.output(), "hold is live"), follow.output()
	})
	w.openGate("go")
	if code := follow.wait(t, 60*time.Second); code != 0 {
		t.Fatalf("run logs -f exit %d:\n%s", code, follow.output())
	}
	out := follow.output()
	want := regexp.MustCompile(`(?s)── step 1/2: svc ──\n\[knotless: this step runs beside the next ones \(detach: true\); its log follows once it has ended\]\n` +
		`── step 2/2: hold ──\nhold is live\n── succeeded, exit 0, [^\n]* ──\n` +
		`── step 1/2: svc ──\nservice up\n\[knotless: detached step stopped at the run's end\]\n── succeeded, [^\n]* ──\n.*run \d+ \(ci\): succeeded`)
	if !want.MatchString(out) {
		t.Errorf("run logs -f:\n%s", out)
	}
}

// A detached step whose service daemonizes (busybox httpd without -f:
// fork, setsid) keeps it across the next steps' ends: where steps get
// cgroups, the service's cgroup spares it; it is stopped at the run's end.
func TestE2E_DetachedServiceThatDaemonizesSurvivesTheNextStepsEnd(t *testing.T) {
	t.Parallel()
	w := newWorld(t, 5*time.Second)
	w.startRunner(w.registerRunner("r1"))
	port := 20000 + int((time.Now().UnixNano()/13)%20000)
	run := w.pushOne(map[string]string{"www/index.html": "from a daemon\n", ".knotless/workflows/ci.yml": fmt.Sprintf(`on:
  push: {}
steps:
  - name: daemon
    detach: true
    run: |
      busybox httpd -p 127.0.0.1:%[1]d -h www
      echo "httpd went into the background"
      exec sleep 600
  - name: first
    run: |
      i=0
      until busybox wget -q -O - http://127.0.0.1:%[1]d/index.html 2>/dev/null; do
        i=$((i+1)); [ $i -lt 100 ] || exit 7; sleep 0.1
      done
  - name: second
    run: busybox wget -q -O - http://127.0.0.1:%[1]d/index.html
`, port)})
	fin := w.waitFinal(run.ID, 60*time.Second)
	if setup := w.stepLog(run.ID, 0); strings.Contains(setup, "no step cgroup") {
		testenv.Skipf(t, "steps get no cgroup on this host: a service that leaves its process group is not told apart")
	}
	if fin.State != api.StateSucceeded {
		t.Fatalf("run %s; second step:\n%s", describe(fin), w.stepLog(run.ID, 3))
	}
	if got := w.stepLog(run.ID, 3); got != "from a daemon\n" {
		t.Errorf("the step after the first: %q, want the daemon's answer", got)
	}
	if pids := pidsWithArg(fmt.Sprintf("127.0.0.1:%d", port)); len(pids) > 0 {
		t.Errorf("the daemon outlived the run: %v", pids)
	}
}

// A queued run (no runner yet) superseded under cancel-in-progress ends at
// once, cancelled/superseded, with its steps settled; the new run waits for
// a runner alone.
func TestE2E_ConcurrencyCancelInProgressEndsAQueuedRunAtOnce(t *testing.T) {
	t.Parallel()
	w := newWorld(t, 5*time.Second)
	first := w.pushOne(map[string]string{".knotless/workflows/ci.yml": concurrencyWorkflow(true), "v": "1"})
	second := w.pushOne(map[string]string{"v": "2"})
	fin := w.waitFinal(first.ID, 30*time.Second)
	if fin.State != api.StateCancelled || fin.Reason != api.ReasonSuperseded {
		t.Fatalf("first run: %s, want cancelled/superseded", describe(fin))
	}
	if r := w.run(second.ID); r.State != api.StateQueued || strings.Contains(r.Message, "concurrency group") {
		t.Fatalf("second run: %s, want queued for a runner, not for the first run", describe(r))
	}
}
