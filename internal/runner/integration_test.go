package runner

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"knotless.dev/knotless/internal/executor/agentenv"
	"knotless.dev/knotless/internal/testwait"

	"knotless.dev/knotless/internal/agent/agenttest"
	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/executor/shell"
	"knotless.dev/knotless/internal/logship"
	"knotless.dev/knotless/internal/server/servertest"
)

// world is a real server with one account, one repository and one
// registered runner identity (state file on disk), for integration tests.
type world struct {
	t     *testing.T
	srv   *servertest.Server
	token string // alice's API token
	repo  string // "alice/app"
	state string // runner state file
	work  string // runner work directory
	src   string // local clone that pushes
}

func newWorld(t *testing.T, approve bool) *world {
	t.Helper()
	if testing.Short() {
		t.Skip("integration test: starts a server and runs processes")
	}
	srv := servertest.Start(t, servertest.Options{})
	w := &world{t: t, srv: srv, repo: "alice/app", work: filepath.Join(t.TempDir(), "work")}
	w.token = srv.CreateAccount(t, "alice")
	srv.CreateRepo(t, w.token, "app")
	w.state = filepath.Join(t.TempDir(), "runner.json")
	st, err := Login(context.Background(), LoginOptions{Server: srv.URL, Repo: w.repo, Name: "r1", State: w.state, Token: srv.AdminToken})
	if err != nil {
		t.Fatalf("login: %v", err)
	}
	if st.ServerDID != srv.DID() {
		t.Fatalf("state has server DID %s, want %s", st.ServerDID, srv.DID())
	}
	if approve {
		w.approve()
	}
	w.src = t.TempDir()
	servertest.Git(t, w.src, "init", "-q", "-b", "main")
	return w
}

func (w *world) approve() {
	w.t.Helper()
	if err := w.srv.Client(w.token).Procedure(context.Background(), api.MethodApproveRunner,
		api.RunnerRef{Repo: w.repo, Name: "r1"}, nil); err != nil {
		w.t.Fatalf("approve: %v", err)
	}
}

func (w *world) setSecret(name, value string) {
	w.t.Helper()
	if err := w.srv.Client(w.token).Procedure(context.Background(), api.MethodSetSecret,
		api.SetSecretInput{Repo: w.repo, Name: name, Value: value}, nil); err != nil {
		w.t.Fatalf("set secret: %v", err)
	}
}

// push commits files (path → content) and pushes main; it returns the run
// the push made (exactly one workflow expected).
func (w *world) push(files map[string]string) api.Run {
	w.t.Helper()
	servertest.Commit(w.t, w.src, files, "change")
	before := w.runIDs()
	w.srv.PushDir(w.t, w.src, w.repo, w.token, "HEAD:refs/heads/main")
	var run api.Run
	testwait.For(w.t, 10*time.Second, "the push's run", func() bool {
		var out api.ListRunsOutput
		if err := w.srv.Admin().Query(context.Background(), api.MethodListRuns, url.Values{"repo": {w.repo}}, &out); err != nil {
			return false
		}
		for _, r := range out.Runs {
			if !before[r.ID] {
				run = r
				return true
			}
		}
		return false
	})
	return run
}

func (w *world) runIDs() map[int64]bool {
	var out api.ListRunsOutput
	_ = w.srv.Admin().Query(context.Background(), api.MethodListRuns, url.Values{"repo": {w.repo}}, &out)
	ids := map[int64]bool{}
	for _, r := range out.Runs {
		ids[r.ID] = true
	}
	return ids
}

// startRunner runs the runner loop in-process until the test ends (or the
// returned stop is called, which waits for Run to return).
func (w *world) startRunner(tweak func(*Config)) (stop func()) {
	w.t.Helper()
	st, err := LoadState(w.state)
	if err != nil {
		w.t.Fatal(err)
	}
	log := testLogger(w.t)
	cfg := Config{
		State: st, WorkDir: w.work, Logger: log, ApprovalPoll: 200 * time.Millisecond, MaxBackoff: 500 * time.Millisecond,
		ClaimWait: 5 * time.Second, Grace: 2 * time.Second, ShipWait: 10 * time.Second,
		Executor: shell.New(shell.Config{Config: agentenv.Config{Agent: agenttest.Binary(w.t), Ephemeral: true, Logger: log}, Dir: filepath.Join(w.work, "shell")}),
	}
	if tweak != nil {
		tweak(&cfg)
	}
	r, err := New(cfg)
	if err != nil {
		w.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		select {
		case err := <-done:
			if err != nil {
				w.t.Errorf("runner: %v", err)
			}
		case <-time.After(60 * time.Second):
			w.t.Errorf("runner did not stop")
		}
	}
	w.t.Cleanup(stop)
	return stop
}

func (w *world) waitFinal(id int64, d time.Duration) api.Run {
	w.t.Helper()
	return w.srv.WaitRun(w.t, id, d, func(r api.Run) bool { return api.IsFinal(r.State) })
}

// stepLog reads a step's whole log from the server.
func (w *world) stepLog(run int64, step int) []byte {
	w.t.Helper()
	resp, err := w.srv.Admin().Do(context.Background(), http.MethodGet, api.MethodGetRunLog,
		url.Values{"run": {strconv.FormatInt(run, 10)}, "step": {strconv.Itoa(step)}}, "", nil)
	if err != nil {
		w.t.Fatalf("get log: %v", err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		w.t.Fatal(err)
	}
	return data
}

func (w *world) getRun(id int64) api.Run {
	var run api.Run
	if err := w.srv.Admin().Query(context.Background(), api.MethodGetRun, url.Values{"run": {strconv.FormatInt(id, 10)}}, &run); err != nil {
		w.t.Fatal(err)
	}
	return run
}

func steps(r api.Run) map[int]api.Step {
	out := map[int]api.Step{}
	for _, s := range r.Steps {
		out[s.Index] = s
	}
	return out
}

// assertCleanedUp checks that no workspace and no spool is left.
func (w *world) assertCleanedUp(run int64) {
	w.t.Helper()
	id := strconv.FormatInt(run, 10)
	testwait.For(w.t, 10*time.Second, "spool removed", func() bool {
		_, err := os.Stat(filepath.Join(w.work, "spool", id))
		return os.IsNotExist(err)
	})
	if _, err := os.Stat(filepath.Join(w.work, "runs", id)); !os.IsNotExist(err) {
		w.t.Fatalf("run directory of run %s left behind (%v)", id, err)
	}
	slots, _ := filepath.Glob(filepath.Join(w.work, "workspaces", "*", "*", "*", "*"))
	for _, s := range slots {
		if fi, err := os.Stat(s); err == nil && fi.IsDir() {
			w.t.Fatalf("workspace %s left behind after run %s", s, id)
		}
	}
}

const wfHead = "on:\n  push: {}\n"

func TestIntegration_RunSucceedsWithWholeOrderedLogs(t *testing.T) {
	w := newWorld(t, true)
	w.startRunner(nil)
	run := w.push(map[string]string{
		"data.txt": "checked out\n",
		".knotless/workflows/ci.yml": wfHead + `
env: {GREETING: hello}
steps:
  - name: count
    run: |
      for i in $(seq 1 500); do echo "line $i"; done
      cat data.txt
  - name: env
    run: echo "$GREETING $KNOTLESS_REPO $KNOTLESS_SHA $KNOTLESS_RUN"
`,
	})
	final := w.waitFinal(run.ID, 60*time.Second)
	if final.State != api.StateSucceeded {
		t.Fatalf("run %+v\nsetup log:\n%s", final, w.stepLog(run.ID, 0))
	}
	var want bytes.Buffer
	for i := 1; i <= 500; i++ {
		fmt.Fprintf(&want, "line %d\n", i)
	}
	want.WriteString("checked out\n")
	if got := w.stepLog(run.ID, 1); !bytes.Equal(got, want.Bytes()) {
		t.Fatalf("step 1 log differs (%d bytes, want %d):\n%s", len(got), want.Len(), got)
	}
	if got, want := string(w.stepLog(run.ID, 2)), fmt.Sprintf("hello %s %s %d\n", w.repo, run.SHA, run.ID); got != want {
		t.Fatalf("step 2 log %q, want %q", got, want)
	}
	st := steps(w.getRun(run.ID))
	if st[1].State != api.StepSucceeded || st[2].State != api.StepSucceeded || st[1].Name != "count" {
		t.Fatalf("steps %+v", st)
	}
	// The setup log tells the fetch before the checkout it serves.
	setup := string(w.stepLog(run.ID, 0))
	fetch, checkout := strings.Index(setup, "fetching "+run.SHA), strings.Index(setup, "checking out "+run.SHA)
	if fetch < 0 || checkout < fetch {
		t.Fatalf("setup log (want fetching, then checking out):\n%s", setup)
	}
	w.assertCleanedUp(run.ID)
}

func TestIntegration_RunnerStartedBeforeApprovalClaimsOnceApproved(t *testing.T) {
	w := newWorld(t, false)
	log, rec := recordingLogger(t)
	w.startRunner(func(c *Config) { c.Logger = log })
	run := w.push(map[string]string{".knotless/workflows/ci.yml": wfHead + "steps:\n  - run: echo approved\n"})
	st, err := LoadState(w.state)
	if err != nil {
		t.Fatal(err)
	}
	testwait.For(t, 10*time.Second, "the runner asking for approval", func() bool {
		return rec.contains("waiting for approval: ask an owner to run: knotless runner approve r1 --repo alice/app --did " + st.DID)
	})
	// Not approved: the run stays queued.
	if r := w.getRun(run.ID); r.State != api.StateQueued {
		t.Fatalf("unapproved runner took run: %s", r.State)
	}
	w.approve()
	if final := w.waitFinal(run.ID, 30*time.Second); final.State != api.StateSucceeded {
		t.Fatalf("run %+v", final)
	}
	if got := string(w.stepLog(run.ID, 1)); got != "approved\n" {
		t.Fatalf("log %q", got)
	}
}

func TestIntegration_SecretsMaskedPlainBase64AndSplit(t *testing.T) {
	w := newWorld(t, true)
	const value = "hunter2-correct-horse"
	w.setSecret("TOKEN", value)
	w.startRunner(nil)
	run := w.push(map[string]string{".knotless/workflows/ci.yml": wfHead + `
secrets: [TOKEN]
steps:
  - name: leak
    secrets: [TOKEN]
    run: |
      echo "plain: $TOKEN"
      printf '%s' "$TOKEN" | base64
      printf 'split: hunter2-corr'; sleep 0.3; printf 'ect-horse\n'
  - name: not-asked
    run: |
      echo "token: ${TOKEN-unset}"
`})
	final := w.waitFinal(run.ID, 60*time.Second)
	if final.State != api.StateSucceeded {
		t.Fatalf("run %+v", final)
	}
	log := string(w.stepLog(run.ID, 1))
	b64 := base64.StdEncoding.EncodeToString([]byte(value))
	for _, leak := range []string{value, b64, "hunter2-corr", "ect-horse"} {
		if strings.Contains(log, leak) {
			t.Fatalf("log holds %q:\n%s", leak, log)
		}
	}
	if !strings.Contains(log, "plain: ***") || !strings.Contains(log, "split: ***") {
		t.Fatalf("log:\n%s", log)
	}
	if got := string(w.stepLog(run.ID, 2)); got != "token: unset\n" {
		t.Fatalf("step that did not list the secret: %q", got)
	}
}

func TestIntegration_StepExitCodeFailsRun(t *testing.T) {
	w := newWorld(t, true)
	w.startRunner(nil)
	run := w.push(map[string]string{".knotless/workflows/ci.yml": wfHead + `
steps:
  - name: bad
    run: |
      echo failing
      exit 7
  - name: after
    run: echo never
`})
	final := w.waitFinal(run.ID, 60*time.Second)
	if final.State != api.StateFailed || final.Reason != api.ReasonExitCode || final.ExitCode == nil || *final.ExitCode != 7 {
		t.Fatalf("run %+v", final)
	}
	st := steps(w.getRun(run.ID))
	if st[1].State != api.StepFailed || st[1].ExitCode == nil || *st[1].ExitCode != 7 || st[2].State != api.StepSkipped {
		t.Fatalf("steps %+v", st)
	}
	if got := string(w.stepLog(run.ID, 1)); got != "failing\n" {
		t.Fatalf("log %q", got)
	}
	w.assertCleanedUp(run.ID)
}

func TestIntegration_TimeoutEndsRunWithReasonTimeout(t *testing.T) {
	w := newWorld(t, true)
	w.startRunner(nil)
	run := w.push(map[string]string{".knotless/workflows/ci.yml": wfHead + `
timeout: 3s
steps:
  - run: echo start; sleep 60
`})
	final := w.waitFinal(run.ID, 30*time.Second)
	if final.State != api.StateFailed || final.Reason != api.ReasonTimeout {
		t.Fatalf("run %+v", final)
	}
	w.assertCleanedUp(run.ID)
}

func TestIntegration_CancelReachesStepWithinSeconds(t *testing.T) {
	w := newWorld(t, true)
	w.startRunner(func(c *Config) { c.Heartbeat = 0 }) // the default interval
	run := w.push(map[string]string{".knotless/workflows/ci.yml": wfHead + `
steps:
  - run: echo started; sleep 120
  - run: echo never
`})
	testwait.For(t, 30*time.Second, "step output", func() bool { return strings.Contains(string(w.stepLog(run.ID, 1)), "started") })
	start := time.Now()
	if err := w.srv.Client(w.token).Procedure(context.Background(), api.MethodCancelRun, api.RunRef{Run: run.ID}, nil); err != nil {
		t.Fatal(err)
	}
	final := w.waitFinal(run.ID, 15*time.Second)
	if d := time.Since(start); d > 8*time.Second {
		t.Fatalf("cancel took %s", d)
	}
	if final.State != api.StateCancelled || final.Reason != api.ReasonCancelled {
		t.Fatalf("run %+v", final)
	}
	st := steps(w.getRun(run.ID))
	if st[2].State != api.StepSkipped {
		t.Fatalf("steps %+v", st)
	}
	w.assertCleanedUp(run.ID)
}

func TestIntegration_ServerDownMidRunLosesNothing(t *testing.T) {
	w := newWorld(t, true)
	w.startRunner(nil)
	run := w.push(map[string]string{".knotless/workflows/ci.yml": wfHead + `
steps:
  - run: |
      echo first
      while [ ! -e "$KNOTLESS_WORKSPACE/../go-on" ]; do sleep 0.05; done
      for i in $(seq 1 2000); do echo "after outage $i"; done
`})
	testwait.For(t, 30*time.Second, "step output", func() bool { return string(w.stepLog(run.ID, 1)) == "first\n" })
	w.srv.Stop()
	if err := os.WriteFile(filepath.Join(w.work, "workspaces", "alice", "app", "ci", "go-on"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	// The run ends while the server is down: its result waits in the spool.
	journal := filepath.Join(w.work, "spool", strconv.FormatInt(run.ID, 10), logship.JournalFile)
	testwait.For(t, 30*time.Second, "the result in the spool", func() bool {
		data, _ := os.ReadFile(journal)
		return bytes.Contains(data, []byte(`"complete"`))
	})
	w.srv.Restart()
	final := w.waitFinal(run.ID, 60*time.Second)
	if final.State != api.StateSucceeded {
		t.Fatalf("run %+v", final)
	}
	var want bytes.Buffer
	want.WriteString("first\n")
	for i := 1; i <= 2000; i++ {
		fmt.Fprintf(&want, "after outage %d\n", i)
	}
	if got := w.stepLog(run.ID, 1); !bytes.Equal(got, want.Bytes()) {
		t.Fatalf("log differs: %d bytes, want %d", len(got), want.Len())
	}
	w.assertCleanedUp(run.ID)
}

func TestIntegration_TenMegabytesAndAMegabyteLineArriveIntact(t *testing.T) {
	w := newWorld(t, true)
	w.startRunner(nil)
	run := w.push(map[string]string{".knotless/workflows/ci.yml": wfHead + `
steps:
  - name: ten-mb
    run: yes 'knotless log line 0123456789abcdefghijklmnopqrstuvwxyz' | head -c 10485760
  - name: long-line
    run: head -c 1048576 /dev/zero | tr '\0' 'y'
`})
	final := w.waitFinal(run.ID, 120*time.Second)
	if final.State != api.StateSucceeded {
		t.Fatalf("run %+v", final)
	}
	line := "knotless log line 0123456789abcdefghijklmnopqrstuvwxyz\n"
	want := bytes.Repeat([]byte(line), 10485760/len(line)+1)[:10485760]
	if got := w.stepLog(run.ID, 1); !bytes.Equal(got, want) {
		t.Fatalf("10 MB log differs: got %d bytes", len(got))
	}
	if got := w.stepLog(run.ID, 2); !bytes.Equal(got, bytes.Repeat([]byte("y"), 1<<20)) {
		t.Fatalf("1 MB line differs: got %d bytes", len(got))
	}
	w.assertCleanedUp(run.ID)
}

func TestIntegration_LogCapMarkerArrives(t *testing.T) {
	w := newWorld(t, true)
	w.startRunner(func(c *Config) { c.LogLimit = 4096 })
	run := w.push(map[string]string{".knotless/workflows/ci.yml": wfHead + `
steps:
  - run: |
      head -c 100000 /dev/zero | tr '\0' 'z'
      echo survived > "$HOME/survived"
`})
	final := w.waitFinal(run.ID, 60*time.Second)
	if final.State != api.StateSucceeded {
		t.Fatalf("run %+v", final)
	}
	want := strings.Repeat("z", 4096) + "\n" + TruncatedMarker(4096)
	if got := string(w.stepLog(run.ID, 1)); got != want {
		t.Fatalf("log is %d bytes, tail %q", len(got), got[max(0, len(got)-100):])
	}
}

func TestIntegration_StopCancelsRunsWithRunnerStopped(t *testing.T) {
	w := newWorld(t, true)
	stop := w.startRunner(func(c *Config) { c.StopWait = 500 * time.Millisecond })
	run := w.push(map[string]string{".knotless/workflows/ci.yml": wfHead + "steps:\n  - run: echo started; sleep 120\n"})
	testwait.For(t, 30*time.Second, "step output", func() bool { return strings.Contains(string(w.stepLog(run.ID, 1)), "started") })
	start := time.Now()
	stop()
	if d := time.Since(start); d > 20*time.Second {
		t.Fatalf("stop took %s", d)
	}
	final := w.waitFinal(run.ID, 5*time.Second)
	if final.State != api.StateCancelled || final.Reason != api.ReasonRunnerStopped {
		t.Fatalf("run %+v", final)
	}
	w.assertCleanedUp(run.ID)
}

func TestIntegration_RestartDeliversSpoolOfEarlierProcess(t *testing.T) {
	w := newWorld(t, true)
	// An earlier process claimed run N, wrote some log and died.
	run := w.push(map[string]string{".knotless/workflows/ci.yml": wfHead + "steps:\n  - run: echo x\n"})
	st, err := LoadState(w.state)
	if err != nil {
		t.Fatal(err)
	}
	claimed, err := sessionClient(t, st).Claim(context.Background(), 5*time.Second)
	if err != nil || claimed == nil {
		t.Fatalf("claim: %v %+v", err, claimed)
	}
	sp, err := logship.CreateSpool(filepath.Join(w.work, "spool"), run.ID)
	if err != nil {
		t.Fatal(err)
	}
	rep := SpoolReporter{Spool: sp}
	rep.Step(StepUpdate{Step: 1, Name: "x", State: api.StepRunning})
	l, _ := rep.Log(1)
	l.Write([]byte("written before the crash\n"))
	l.Close()
	sp.Close()
	os.MkdirAll(filepath.Join(w.work, "runs", strconv.FormatInt(run.ID, 10), "workspace"), 0o700)

	w.startRunner(nil)
	final := w.waitFinal(run.ID, 30*time.Second)
	if final.State != api.StateErrored || final.Reason != api.ReasonRunnerLost {
		t.Fatalf("run %+v", final)
	}
	if got := string(w.stepLog(run.ID, 1)); got != "written before the crash\n" {
		t.Fatalf("log %q", got)
	}
	w.assertCleanedUp(run.ID)
}

func TestIntegration_CapacityRunsTwoAtOnce(t *testing.T) {
	w := newWorld(t, true)
	w.startRunner(func(c *Config) { c.Capacity = 2 })
	// Two workflows, one push: two runs of one repository, each waiting
	// until both have started (they share the mirror).
	wf := wfHead + `
steps:
  - run: |
      touch "$KNOTLESS_WORKSPACE/../../started-$KNOTLESS_RUN"
      n=0
      while [ "$(ls "$KNOTLESS_WORKSPACE/../.." | grep -c '^started-')" -lt 2 ]; do
        sleep 0.05; n=$((n+1)); [ $n -lt 400 ] || exit 9
      done
      echo together
`
	w.push(map[string]string{".knotless/workflows/a.yml": wf, ".knotless/workflows/b.yml": wf})
	var runs []api.Run
	testwait.For(t, 10*time.Second, "two runs", func() bool {
		var out api.ListRunsOutput
		w.srv.Admin().Query(context.Background(), api.MethodListRuns, url.Values{"repo": {w.repo}}, &out)
		runs = out.Runs
		return len(runs) == 2
	})
	for _, r := range runs {
		final := w.waitFinal(r.ID, 60*time.Second)
		if final.State != api.StateSucceeded {
			t.Fatalf("run %d: %+v\n%s", r.ID, final, w.stepLog(r.ID, 1))
		}
		if got := string(w.stepLog(r.ID, 1)); got != "together\n" {
			t.Fatalf("run %d log %q", r.ID, got)
		}
	}
}

// Two runs of the same workflow at once under --capacity 2 (pushes of two
// branches) check out at two stable paths, slots 0 and 1 of the
// repository's workflow; the next run gets slot 0 again.
func TestIntegration_ConcurrentRunsOfOneWorkflowGetTheirOwnStableWorkspace(t *testing.T) {
	w := newWorld(t, true)
	w.startRunner(func(c *Config) { c.Capacity = 2 })
	wf := wfHead + `
steps:
  - run: |
      touch "$KNOTLESS_WORKSPACE/../started-$KNOTLESS_RUN"
      n=0
      while [ "$(ls "$KNOTLESS_WORKSPACE/.." | grep -c '^started-')" -lt 2 ]; do
        sleep 0.05; n=$((n+1)); [ $n -lt 400 ] || exit 9
      done
      echo "workspace $KNOTLESS_WORKSPACE"
`
	servertest.Commit(t, w.src, map[string]string{".knotless/workflows/ci.yml": wf}, "ci")
	w.srv.PushDir(t, w.src, w.repo, w.token, "HEAD:refs/heads/main", "HEAD:refs/heads/other")
	var runs []api.Run
	testwait.For(t, 10*time.Second, "two runs", func() bool {
		var out api.ListRunsOutput
		w.srv.Admin().Query(context.Background(), api.MethodListRuns, url.Values{"repo": {w.repo}}, &out)
		runs = out.Runs
		return len(runs) == 2
	})
	base := filepath.Join(w.work, "workspaces", "alice", "app", "ci")
	got := map[string]bool{}
	for _, r := range runs {
		final := w.waitFinal(r.ID, 60*time.Second)
		if final.State != api.StateSucceeded {
			t.Fatalf("run %d: %+v\n%s", r.ID, final, w.stepLog(r.ID, 1))
		}
		got[strings.TrimSpace(strings.TrimPrefix(string(w.stepLog(r.ID, 1)), "workspace "))] = true
	}
	if !got[filepath.Join(base, "0")] || !got[filepath.Join(base, "1")] {
		t.Fatalf("workspaces %v, want %s/0 and %s/1", got, base, base)
	}
	run := w.push(map[string]string{".knotless/workflows/ci.yml": wfHead + "steps:\n  - run: echo \"workspace $KNOTLESS_WORKSPACE\"\n"})
	if final := w.waitFinal(run.ID, 60*time.Second); final.State != api.StateSucceeded {
		t.Fatalf("third run: %+v", final)
	}
	if log := string(w.stepLog(run.ID, 1)); log != "workspace "+filepath.Join(base, "0")+"\n" {
		t.Errorf("the next run's log %q, want it at slot 0 again", log)
	}
}
