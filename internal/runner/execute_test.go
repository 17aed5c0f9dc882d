package runner

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"knotless.dev/knotless/internal/executor/agentenv"
	"knotless.dev/knotless/internal/logship"
	"knotless.dev/knotless/internal/testwait"

	"knotless.dev/knotless/internal/agent/agenttest"
	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/executor"
	"knotless.dev/knotless/internal/executor/shell"
	"knotless.dev/knotless/internal/workflow"
)

// memReporter keeps everything a run reports, for assertions.
type memReporter struct {
	mu      sync.Mutex
	logs    map[int]*bytes.Buffer
	updates []StepUpdate
	result  *Result
}

func newMemReporter() *memReporter { return &memReporter{logs: map[int]*bytes.Buffer{}} }

type memLog struct {
	r    *memReporter
	step int
}

func (l memLog) Write(p []byte) (int, error) {
	l.r.mu.Lock()
	defer l.r.mu.Unlock()
	return l.r.logs[l.step].Write(p)
}
func (memLog) Close() error      { return nil }
func (memLog) FreeReserve() bool { return false }

func (r *memReporter) Log(step int) (logship.LogFile, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.logs[step] == nil {
		r.logs[step] = &bytes.Buffer{}
	}
	return memLog{r, step}, nil
}

func (r *memReporter) Step(u StepUpdate) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.updates = append(r.updates, u)
	return nil
}

func (r *memReporter) Done(res Result) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.result = &res
	return nil
}

func (r *memReporter) log(step int) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.logs[step] == nil {
		return ""
	}
	return r.logs[step].String()
}

// final returns each step's last state.
func (r *memReporter) final() map[int]StepUpdate {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[int]StepUpdate{}
	for _, u := range r.updates {
		out[u.Step] = u
	}
	return out
}

// testJob makes a job whose workspace is a fresh directory.
func testJob(t *testing.T, workflowYAML string) Job {
	t.Helper()
	ws := t.TempDir()
	return Job{
		Run: 42, Pipeline: 7, Repo: "alice/app", Ref: "refs/heads/main", SHA: strings.Repeat("a", 40),
		WorkflowPath: ".knotless/workflows/ci.yml", WorkflowSource: []byte(workflowYAML),
		Workspace: ws, Grace: time.Second, Logger: testLogger(t),
	}
}

func testShell(t *testing.T) *shell.Executor {
	return shell.New(shell.Config{Config: agentenv.Config{Agent: agenttest.Binary(t), Ephemeral: true, Logger: testLogger(t)}, Dir: filepath.Join(t.TempDir(), "shell")})
}

func execute(t *testing.T, ctx context.Context, job Job) (*memReporter, Result) {
	t.Helper()
	rep := newMemReporter()
	res := Execute(ctx, job, testShell(t), rep)
	if rep.result == nil || !reflect.DeepEqual(*rep.result, res) {
		t.Fatalf("Done got %+v, Execute returned %+v", rep.result, res)
	}
	return rep, res
}

func TestExecute_FailingStepFailsRunAndSkipsTheRest(t *testing.T) {
	job := testJob(t, `
on: {push: {}}
env: {WF: wf, BOTH: from-workflow}
steps:
  - name: env
    env: {BOTH: from-step}
    run: |
      echo "CI=$CI KNOTLESS=$KNOTLESS repo=$KNOTLESS_REPO ref=$KNOTLESS_REF sha=$KNOTLESS_SHA"
      echo "pipeline=$KNOTLESS_PIPELINE run=$KNOTLESS_RUN workflow=$KNOTLESS_WORKFLOW"
      echo "ws=$KNOTLESS_WORKSPACE pwd=$(pwd) home=$HOME wf=$WF both=$BOTH"
  - name: soft
    continue-on-error: true
    run: exit 5
  - name: hard
    run: |
      echo before
      exit 3
  - name: later
    run: echo never
`)
	rep, res := execute(t, context.Background(), job)
	if res.State != api.StateFailed || res.Reason != api.ReasonExitCode || res.ExitCode == nil || *res.ExitCode != 3 {
		t.Fatalf("result %+v, want failed/exit-code/3", res)
	}
	out := rep.log(1)
	for _, want := range []string{
		"CI=true KNOTLESS=true repo=alice/app ref=refs/heads/main sha=" + job.SHA,
		"pipeline=7 run=42 workflow=ci",
		// HOME is the executor's own (Config.Dir/<ID>/home), not the runner's.
		"ws=" + job.Workspace + " pwd=" + job.Workspace + " home=/",
		"/shell/run-42/home wf=wf both=from-step",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("step 1 log lacks %q:\n%s", want, out)
		}
	}
	f := rep.final()
	if f[0].State != api.StepSucceeded || f[1].State != api.StepSucceeded || f[2].State != api.StepFailed || f[3].State != api.StepFailed || f[4].State != api.StepSkipped {
		t.Fatalf("step states %+v", f)
	}
	if f[2].ExitCode == nil || *f[2].ExitCode != 5 || f[3].Reason != api.ReasonExitCode {
		t.Fatalf("step results %+v %+v", f[2], f[3])
	}
	if rep.log(3) != "before\n" {
		t.Fatalf("step 3 log %q", rep.log(3))
	}
	if rep.log(4) != "" {
		t.Fatalf("skipped step has a log: %q", rep.log(4))
	}
}

func TestExecute_InvalidWorkflowIsErroredWithPosition(t *testing.T) {
	job := testJob(t, "on: {push: {}}\nsteps:\n  - name: x\n    runn: echo\n")
	rep, res := execute(t, context.Background(), job)
	if res.State != api.StateErrored || res.Reason != api.ReasonWorkflowInvalid {
		t.Fatalf("result %+v", res)
	}
	if f := rep.final(); f[0].State != api.StepErrored || f[0].Reason != api.ReasonWorkflowInvalid || f[0].Name != SetupName {
		t.Fatalf("setup step %+v", f[0])
	}
	if !strings.Contains(rep.log(0), ".knotless/workflows/ci.yml:4:5") {
		t.Fatalf("setup log lacks FILE:LINE:COL:\n%s", rep.log(0))
	}
}

func TestExecute_StepTimeoutFailsWithReasonTimeout(t *testing.T) {
	job := testJob(t, `
on: {push: {}}
steps:
  - name: slow
    timeout: 1s
    run: sleep 30
`)
	start := time.Now()
	rep, res := execute(t, context.Background(), job)
	if res.State != api.StateFailed || res.Reason != api.ReasonTimeout {
		t.Fatalf("result %+v, want failed/timeout", res)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("took %s", d)
	}
	if f := rep.final(); f[1].State != api.StepFailed || f[1].Reason != api.ReasonTimeout {
		t.Fatalf("step %+v", f[1])
	}
}

func TestExecute_RunTimeoutBoundsAllSteps(t *testing.T) {
	job := testJob(t, `
on: {push: {}}
timeout: 2s
steps:
  - run: sleep 1
  - run: sleep 30
  - run: echo never
`)
	rep, res := execute(t, context.Background(), job)
	if res.State != api.StateFailed || res.Reason != api.ReasonTimeout {
		t.Fatalf("result %+v, want failed/timeout", res)
	}
	f := rep.final()
	if f[1].State != api.StepSucceeded || f[2].Reason != api.ReasonTimeout || f[3].State != api.StepSkipped {
		t.Fatalf("steps %+v", f)
	}
}

func TestExecute_CancelEndsRunCancelledWithinSeconds(t *testing.T) {
	for _, tc := range []struct {
		cause  error
		reason string
	}{{ErrCancelled, api.ReasonCancelled}, {ErrRunnerStopped, api.ReasonRunnerStopped}} {
		t.Run(tc.reason, func(t *testing.T) {
			job := testJob(t, `
on: {push: {}}
steps:
  - run: echo started; sleep 60
  - run: echo never
`)
			ctx, cancel := context.WithCancelCause(context.Background())
			rep := newMemReporter()
			done := make(chan Result, 1)
			go func() { done <- Execute(ctx, job, testShell(t), rep) }()
			testwait.For(t, 10*time.Second, "step output", func() bool { return strings.Contains(rep.log(1), "started") })
			start := time.Now()
			cancel(tc.cause)
			res := <-done
			if d := time.Since(start); d > 5*time.Second {
				t.Fatalf("cancel took %s", d)
			}
			if res.State != api.StateCancelled || res.Reason != tc.reason {
				t.Fatalf("result %+v, want cancelled/%s", res, tc.reason)
			}
			if f := rep.final(); f[1].State != api.StepCancelled || f[2].State != api.StepSkipped {
				t.Fatalf("steps %+v", f)
			}
		})
	}
}

// TestExecute_StepWhoseAgentIsSignalledFromOutsideIsErroredNotCancelled:
// the step agent stops its running step as cancelled when its own process
// is signalled (on kube and docker: the pod deleted or evicted, the
// container stopped from outside). Nobody cancelled the run, so it must
// not read as cancelled: it ends errored, with the environment's reason
// and words, and the later steps are skipped.
func TestExecute_StepWhoseAgentIsSignalledFromOutsideIsErroredNotCancelled(t *testing.T) {
	job := testJob(t, `
on: {push: {}}
steps:
  - run: echo started; kill -TERM $PPID; sleep 60
  - run: echo never
`)
	rep, res := execute(t, context.Background(), job)
	if res.State != api.StateErrored || res.Reason != api.ReasonExecutor {
		t.Fatalf("result %+v, want errored/executor", res)
	}
	f := rep.final()
	if f[1].State == api.StepCancelled || f[1].Reason != api.ReasonExecutor || f[2].State != api.StepSkipped {
		t.Fatalf("steps %+v", f)
	}
	if log := rep.log(1); !strings.Contains(log, "step agent") {
		t.Errorf("the step's log does not say what happened to its agent:\n%s", log)
	}
}

func TestExecute_SecretsOnlyForStepsThatListThemAndMasked(t *testing.T) {
	const value = "s3cr3t-value-123"
	job := testJob(t, `
on: {push: {}}
secrets: [TOKEN, ABSENT]
steps:
  - name: asks
    secrets: [TOKEN, ABSENT]
    run: |
      echo "token=$TOKEN"
      printf '%s' "$TOKEN" | base64
      printf 's3cr3t-'; printf 'value-123\n'
      echo "absent=${ABSENT-unset}"
  - name: does-not-ask
    run: echo "token=${TOKEN-unset}"
`)
	job.Secrets = map[string]string{"TOKEN": value}
	rep, res := execute(t, context.Background(), job)
	if res.State != api.StateSucceeded {
		t.Fatalf("result %+v\n%s", res, rep.log(0))
	}
	out := rep.log(1)
	b64 := base64.StdEncoding.EncodeToString([]byte(value))
	if strings.Contains(out, value) || strings.Contains(out, b64) || strings.Contains(out, "s3cr3t-value") {
		t.Fatalf("secret leaked:\n%s", out)
	}
	if !strings.Contains(out, "token=***") || !strings.Contains(out, "absent=unset") {
		t.Fatalf("step 1 log:\n%s", out)
	}
	if !strings.Contains(out, "secret ABSENT has no value") {
		t.Fatalf("missing secret not noted:\n%s", out)
	}
	if got := rep.log(2); got != "token=unset\n" {
		t.Fatalf("a step that did not list the secret got it: %q", got)
	}
}

func TestExecute_LogCapWritesMarkerAndStepKeepsRunning(t *testing.T) {
	job := testJob(t, `
on: {push: {}}
steps:
  - run: |
      head -c 5000 /dev/zero | tr '\0' 'x'
      echo done > marker-file
`)
	job.LogLimit = 1000
	rep, res := execute(t, context.Background(), job)
	if res.State != api.StateSucceeded {
		t.Fatalf("result %+v", res)
	}
	want := strings.Repeat("x", 1000) + "\n" + TruncatedMarker(1000)
	if got := rep.log(1); got != want {
		t.Fatalf("log is %d bytes, ends %q", len(got), got[max(0, len(got)-80):])
	}
	if _, err := os.Stat(filepath.Join(job.Workspace, "marker-file")); err != nil {
		t.Fatal("the step stopped at the cap")
	}
}

func TestExecute_SharedStepWithInputs(t *testing.T) {
	job := testJob(t, `
on: {push: {}}
steps:
  - uses: ./.knotless/steps/greet
    with: {who: world}
`)
	dir := filepath.Join(job.Workspace, ".knotless", "steps", "greet")
	os.MkdirAll(dir, 0o755)
	os.WriteFile(filepath.Join(dir, "step.yml"), []byte(`
name: greet
inputs:
  who: {required: true}
  punct: {default: "!"}
env: {GREETING: hello}
run: |
  echo "$GREETING $KNOTLESS_INPUT_WHO$KNOTLESS_INPUT_PUNCT"
  cat "$KNOTLESS_STEP_DIR/data.txt"
`), 0o644)
	os.WriteFile(filepath.Join(dir, "data.txt"), []byte("from the step's directory\n"), 0o644)
	rep, res := execute(t, context.Background(), job)
	if res.State != api.StateSucceeded {
		t.Fatalf("result %+v\n%s", res, rep.log(1))
	}
	if got := rep.log(1); got != "hello world!\nfrom the step's directory\n" {
		t.Fatalf("log %q", got)
	}
}

func TestExecute_BrokenSharedStepErrorsTheRun(t *testing.T) {
	job := testJob(t, `
on: {push: {}}
steps:
  - uses: ./.knotless/steps/missing
  - run: echo never
`)
	rep, res := execute(t, context.Background(), job)
	if res.State != api.StateErrored || res.Reason != api.ReasonWorkflowInvalid {
		t.Fatalf("result %+v", res)
	}
	if !strings.Contains(rep.log(1), "no step.yml") {
		t.Fatalf("step log %q", rep.log(1))
	}
	if f := rep.final(); f[1].State != api.StepErrored || f[2].State != api.StepSkipped {
		t.Fatalf("steps %+v", f)
	}
}

// Without a cache store (exec) caches are not used, and outputs need a
// reporter that stores them (the spool's); with another one (exec's
// console) the setup log says so for both.
func TestExecute_CachesWithoutAStoreAndOutputsWithoutASinkAreAnnounced(t *testing.T) {
	job := testJob(t, `
on: {push: {}}
caches:
  - key: k
    paths: [x]
outputs: [dist/]
steps:
  - run: "true"
`)
	rep, res := execute(t, context.Background(), job)
	if res.State != api.StateSucceeded {
		t.Fatalf("result %+v", res)
	}
	setup := rep.log(0)
	if !strings.Contains(setup, "caches: not used: knotless-run exec keeps no cache store") ||
		!strings.Contains(setup, "outputs: not collected: knotless-run exec stores no outputs") {
		t.Fatalf("setup log:\n%s", setup)
	}
}

func TestExecute_CheckoutFailureIsErroredCheckout(t *testing.T) {
	job := testJob(t, "on: {push: {}}\nsteps:\n  - run: echo never\n")
	job.Checkout = func(ctx context.Context, _ workflow.Checkout, log io.Writer) error {
		io.WriteString(log, "fatal: remote error: not our ref\n")
		return os.ErrNotExist
	}
	rep, res := execute(t, context.Background(), job)
	if res.State != api.StateErrored || res.Reason != api.ReasonCheckout {
		t.Fatalf("result %+v", res)
	}
	if !strings.Contains(rep.log(0), "not our ref") {
		t.Fatalf("git's error not in the setup log:\n%s", rep.log(0))
	}
	if f := rep.final(); f[0].State != api.StepErrored || f[0].Reason != api.ReasonCheckout || f[1].State != api.StepSkipped {
		t.Fatalf("steps %+v", f)
	}
}

func TestCapWriter_MarkerOnItsOwnLine(t *testing.T) {
	var b bytes.Buffer
	c := newCapWriter(&b, 10)
	c.Write([]byte("0123"))
	c.Write([]byte("456789abc"))
	c.Write([]byte("more"))
	if want := "0123456789\n" + TruncatedMarker(10); b.String() != want {
		t.Fatalf("got %q want %q", b.String(), want)
	}
}

func TestConsoleReporter_FramesStepsAndSummary(t *testing.T) {
	var b bytes.Buffer
	c := &ConsoleReporter{Out: &b, Workflow: "ci"}
	setup, _ := c.Log(0)
	c.Step(StepUpdate{Step: 1, Name: "build", State: api.StepPending})
	c.Step(StepUpdate{Step: 2, Name: "test", State: api.StepPending})
	c.Step(StepUpdate{Step: 0, Name: SetupName, State: api.StepRunning})
	setup.Write([]byte("preparing\n"))
	c.Step(StepUpdate{Step: 0, Name: SetupName, State: api.StepSucceeded})
	c.Step(StepUpdate{Step: 1, Name: "build", State: api.StepRunning})
	l1, _ := c.Log(1)
	l1.Write([]byte("no newline"))
	c.Step(StepUpdate{Step: 1, Name: "build", State: api.StepFailed, ExitCode: ptr(2), Reason: api.ReasonExitCode})
	c.Step(StepUpdate{Step: 2, Name: "test", State: api.StepSkipped})
	c.Done(Result{State: api.StateFailed, Reason: api.ReasonExitCode, ExitCode: ptr(2)})
	want := "── setup ──\npreparing\n── done ──\n── step 1/2: build ──\nno newline\n── failed, exit 2 ──\n" +
		"── step 2/2: test ──\n── skipped ──\nrun 0 (ci): failed, exit-code, exit 2\n"
	if b.String() != want {
		t.Fatalf("got:\n%s\nwant:\n%s", b.String(), want)
	}
}

func TestExecute_OperatorEnvReachesStepsAndWorkflowEnvWins(t *testing.T) {
	job := testJob(t, `
env: {SHARED: from-workflow}
steps:
  - run: echo "cache=$GOCACHE shared=$SHARED run=$KNOTLESS_RUN home=$HOME"
`)
	job.Env = map[string]string{"GOCACHE": "/var/cache/go", "SHARED": "from-runner", "KNOTLESS_RUN": "999", "HOME": "/nowhere"}
	rep, res := execute(t, context.Background(), job)
	if res.State != api.StateSucceeded {
		t.Fatalf("result %+v", res)
	}
	if got, want := rep.log(1), "cache=/var/cache/go shared=from-workflow run=42 home="; !strings.HasPrefix(got, want) || strings.Contains(got, "/nowhere") {
		t.Fatalf("step log %q, want %q", got, want)
	}
}

// recordingExecutor keeps every step its sessions are handed.
type recordingExecutor struct {
	executor.Executor
	mu    sync.Mutex
	steps []executor.Step
}

func (r *recordingExecutor) Prepare(ctx context.Context, spec executor.Spec) (executor.Session, error) {
	s, err := r.Executor.Prepare(ctx, spec)
	if err != nil {
		return nil, err
	}
	return &recordingSession{Session: s, r: r}, nil
}

type recordingSession struct {
	executor.Session
	r *recordingExecutor
}

func (s *recordingSession) Exec(ctx context.Context, st executor.Step, out io.Writer) (executor.Result, error) {
	s.r.mu.Lock()
	s.r.steps = append(s.r.steps, st)
	s.r.mu.Unlock()
	return s.Session.Exec(ctx, st, out)
}

// TestExecute_StepsAreExecutorNeutral pins what the runner hands any
// executor: DefaultShell when the step names no shell, and no HOME (each
// executor makes its own), also when the operator's --env has one.
func TestExecute_StepsAreExecutorNeutral(t *testing.T) {
	job := testJob(t, `
steps:
  - run: echo default
  - shell: bash -eo pipefail
    run: echo bash
`)
	job.Env = map[string]string{"HOME": "/host/home"}
	ex := &recordingExecutor{Executor: testShell(t)}
	rep := newMemReporter()
	if res := Execute(context.Background(), job, ex, rep); res.State != api.StateSucceeded {
		t.Fatalf("result %+v", res)
	}
	if len(ex.steps) != 2 {
		t.Fatalf("%d steps executed", len(ex.steps))
	}
	if got := ex.steps[0].Shell; !slices.Equal(got, executor.DefaultShell) {
		t.Errorf("step without shell got %q, want %q", got, executor.DefaultShell)
	}
	if got := ex.steps[1].Shell; !slices.Equal(got, []string{"bash", "-eo", "pipefail"}) {
		t.Errorf("bash step got %q", got)
	}
	for i, st := range ex.steps {
		if home, ok := st.Env["HOME"]; ok {
			t.Errorf("step %d was handed HOME=%s", i+1, home)
		}
	}
}

// TestExecute_EarlyPreparedEnvironmentGoesWithAFailedCheckout pins the
// environment an executor that prepares early (shell) starts while the
// checkout is made: a failed checkout cleans it up (no agent, no session
// directory left), and a good one finds it ready, its setup-log lines after
// the checkout's.
func TestExecute_EarlyPreparedEnvironmentGoesWithAFailedCheckout(t *testing.T) {
	for _, fail := range []bool{true, false} {
		shellDir := filepath.Join(t.TempDir(), "shell")
		ex := shell.New(shell.Config{Config: agentenv.Config{Agent: agenttest.Binary(t), Ephemeral: true, Logger: testLogger(t)}, Dir: shellDir})
		job := testJob(t, "on: {push: {}}\nsteps:\n  - run: cat file.txt\n")
		job.Workspace = filepath.Join(t.TempDir(), "ws") // made by Execute
		job.Checkout = func(ctx context.Context, _ workflow.Checkout, log io.Writer) error {
			// The environment starts meanwhile: wait until its agent listens.
			deadline := time.Now().Add(20 * time.Second)
			for {
				if _, err := os.Stat(filepath.Join(shellDir, "run-42", "agent.json")); err == nil {
					break
				}
				if time.Now().After(deadline) {
					return errors.New("the environment did not start during the checkout")
				}
				time.Sleep(5 * time.Millisecond)
			}
			io.WriteString(log, "checkout line\n")
			if fail {
				return errors.New("fatal: not our ref")
			}
			return os.WriteFile(filepath.Join(job.Workspace, "file.txt"), []byte("checked out\n"), 0o644)
		}
		rep := newMemReporter()
		res := Execute(context.Background(), job, ex, rep)
		setup := rep.log(0)
		if fail {
			if res.State != api.StateErrored || res.Reason != api.ReasonCheckout {
				t.Fatalf("failed checkout: result %+v\n%s", res, setup)
			}
			if ents, err := os.ReadDir(shellDir); err != nil || len(ents) != 0 {
				t.Fatalf("failed checkout: the environment stayed: %v %v", ents, err)
			}
			continue
		}
		if res.State != api.StateSucceeded || rep.log(1) != "checked out\n" {
			t.Fatalf("result %+v, step log %q\n%s", res, rep.log(1), setup)
		}
		c, e := strings.Index(setup, "checkout line"), strings.Index(setup, "shell executor:")
		if c < 0 || e < c {
			t.Fatalf("the executor's setup lines are not after the checkout's:\n%s", setup)
		}
	}
}

// A value that is not valid UTF-8 reaches the step byte-exact, and the
// step's raw printing of it is masked.
func TestExecute_NonUTF8SecretIsNotAlteredAndIsMasked(t *testing.T) {
	value := string([]byte{0xff, 0xfe, 0x80, 'k', 0xc3, 0x28, 0xa0, 0xa1, 0xe2, 0x28, 0xa1, 0xf0, 0x90, 0x28, 0xbc, 0x01, 0x7f, 0xed, 0xa0})
	job := testJob(t, `
on: {push: {}}
secrets: [RAW]
steps:
  - secrets: [RAW]
    run: |
      printf 'len=%s\n' "$(printf %s "$RAW" | wc -c)"
      printf %s "$RAW" | od -An -tx1 | tr -d ' \n'; echo
      printf 'raw=%s\n' "$RAW"
`)
	job.Secrets = map[string]string{"RAW": value}
	rep, res := execute(t, context.Background(), job)
	if res.State != api.StateSucceeded {
		t.Fatalf("result %+v\n%s", res, rep.log(0))
	}
	out := rep.log(1)
	want := fmt.Sprintf("len=19\n%x\nraw=***\n", value)
	if strings.TrimLeft(out, " ") != want {
		t.Fatalf("step log:\n%q\nwant\n%q", out, want)
	}
}

// A value with a NUL byte (stored by an older server) used to end the run
// errored (executor) with a bare execve error: the run ends errored
// (secret-invalid) naming the secret, before any step, and says what to do.
func TestExecute_SecretWithNULEndsRunNamingTheSecret(t *testing.T) {
	job := testJob(t, `
on: {push: {}}
secrets: [GOOD, BAD]
steps:
  - secrets: [GOOD, BAD]
    run: touch ran
`)
	job.Secrets = map[string]string{"GOOD": "a-good-value", "BAD": "hello\x00world"}
	rep, res := execute(t, context.Background(), job)
	if res.State != api.StateErrored || res.Reason != api.ReasonSecretInvalid || !strings.Contains(res.Message, "secret BAD: the value holds a NUL byte") {
		t.Fatalf("result %+v, want errored/secret-invalid naming BAD\n%s", res, rep.log(0))
	}
	if setup := rep.log(0); !strings.Contains(setup, "knotless secret set BAD") {
		t.Errorf("setup log does not say how to fix it:\n%s", setup)
	}
	if _, err := os.Stat(filepath.Join(job.Workspace, "ran")); err == nil {
		t.Errorf("the step ran")
	}
}
