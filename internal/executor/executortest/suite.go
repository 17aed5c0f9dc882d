package executortest

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/executor"
)

// Harness builds whole executors for the suite, so that it can also
// restart them as a new runner process would.
type Harness struct {
	// Executor is called once per scenario and returns a constructor: each
	// call of it makes a new Executor as a restarted runner process would
	// (the same configuration and directories, nothing shared in memory).
	Executor func(t *testing.T) func() executor.Executor
	// Spec returns the spec of a new environment with the given ID over a
	// fresh, empty workspace.
	Spec func(t *testing.T, id string) executor.Spec
	// Env says what the suite can observe of a session's environment.
	Env func(t *testing.T, s executor.Session) Env
	// Leftovers describes what is left of environment id (processes,
	// directories, pods, ...): nil when nothing is. Nil makes the scenarios
	// that need it say so and skip those checks.
	Leftovers func(t *testing.T, id string) []string
}

// scenario is one behaviour every executor must have, named for the
// failure it pins. Session scenarios get a fresh prepared session;
// lifecycle scenarios get the harness and build their own.
type scenario struct {
	name string
	run  func(t *testing.T, s executor.Session, env Env)
}

var scenarios = []scenario{
	{"ExitCodeZeroIsSuccess", testExitZero},
	{"ExitCodeThreeIsKept", testExitThree},
	{"FalseUnderDashEStopsStep", testFalseUnderDashE},
	{"ShellWithoutDashEContinuesAfterFalse", testShellWithoutDashE},
	{"WorkdirIsWorkingDirectory", testWorkdir},
	{"StdoutStderrOrderKept", testInterleaving},
	{"EnvByteExact", testEnvByteExact},
	{"RunnerEnvNotVisible", testRunnerEnvNotVisible},
	{"ScriptAndSecretNeverInArgv", testNeverInArgv},
	{"TimeoutKillsStepIgnoringTERM", testTimeoutIgnoringTERM},
	{"CancelGivesCancelled", testCancel},
	{"CancelTrappedExitZeroStillCancelled", testCancelTrapped},
	{"ContextDeadlineGivesTimeout", testContextDeadline},
	{"BackgroundProcessDoesNotHoldStep", testBackgroundRedirected},
	{"BackgroundProcessHoldingOutputDoesNotHoldStep", testBackgroundHoldingOutput},
	{"EscapedProcessesDieWithSuccessfulStep", testEscapesSucceeded},
	{"EscapedProcessesDieWithCancelledStep", testEscapesCancelled},
	{"EscapedProcessesDieWithTimedOutStep", testEscapesTimedOut},
	{"PipeIntoHeadEndsQuietly", testSIGPIPEDefault},
	{"SecondExecOfAStepIDAttaches", testSecondExecAttaches},
	{"LargeOutputByteExact", testLargeOutput},
	{"LongLineWithoutNewlineByteExact", testLongLine},
	{"NonUTF8BytesIntact", testNonUTF8},
	{"CleanupTwiceReturnsNil", testCleanupTwice},
	{"CleanupDuringExecEndsExec", testCleanupDuringExec},
	{"CopyRoundTripKeepsBytesModesSymlinks", testCopyRoundTrip},
	{"CopyOutOfAStepMadeTreeKeepsNestingLinksAndBigFiles", testCopyOutStepMadeTree},
	{"CopyOutOfAMissingPathIsNotExist", testCopyOutMissingIsNotExist},
	{"CopyOutThroughALinkLeavingTheWorkdirIsRefused", testCopyOutThroughLinkLeavingWorkdirRefused},
	{"CacheRestoredChangedBySavedNeverChangesTheEntry", testCacheRestoreStepSave},
}

// Run runs every scenario as a subtest of t: the session scenarios each in
// a fresh session, then the lifecycle scenarios (Prepare failures, Detach,
// Recover, Sweep across executor restarts). Subtests run one after another
// (some use t.Setenv), so the caller must not mark t parallel.
func Run(t *testing.T, h Harness) {
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			newExecutor := h.Executor(t)
			s, err := newExecutor().Prepare(context.Background(), h.Spec(t, "run-1"))
			if err != nil {
				t.Fatalf("Prepare: %v", err)
			}
			t.Cleanup(func() {
				ctx, cancel := context.WithTimeout(context.Background(), pollDeadline)
				defer cancel()
				if err := s.Cleanup(ctx); err != nil {
					t.Errorf("Cleanup: %v", err)
				}
			})
			sc.run(t, s, h.Env(t, s))
		})
	}
	for _, sc := range lifecycle {
		t.Run(sc.name, func(t *testing.T) { sc.run(t, h) })
	}
}

func assertResult(t *testing.T, res executor.Result, code int, reason string, out []byte) {
	t.Helper()
	if res.ExitCode != code || res.Reason != reason {
		t.Fatalf("result: exit code %d, reason %q; want %d, %q (output %q)", res.ExitCode, res.Reason, code, reason, clip(out))
	}
}

func testExitZero(t *testing.T, s executor.Session, env Env) {
	res, out := run(t, s, executor.Step{Name: "ok", Script: "echo hello\n"})
	assertResult(t, res, 0, "", out)
	if string(out) != "hello\n" {
		t.Errorf("output %q, want %q", out, "hello\n")
	}
	if res.Duration <= 0 {
		t.Errorf("duration %v, want > 0", res.Duration)
	}
}

func testExitThree(t *testing.T, s executor.Session, env Env) {
	res, out := run(t, s, executor.Step{Script: "echo before\nexit 3\necho after\n"})
	assertResult(t, res, 3, "", out)
	if string(out) != "before\n" {
		t.Errorf("output %q, want %q", out, "before\n")
	}
}

func testFalseUnderDashE(t *testing.T, s executor.Session, env Env) {
	res, out := run(t, s, executor.Step{Script: "echo before\nfalse\necho after\n"})
	assertResult(t, res, 1, "", out)
	if string(out) != "before\n" {
		t.Errorf("output %q: the default shell must stop at the first failing command (sh -e)", out)
	}
}

func testShellWithoutDashE(t *testing.T, s executor.Session, env Env) {
	res, out := run(t, s, executor.Step{Shell: []string{"/bin/sh"}, Script: "false\necho after\n"})
	assertResult(t, res, 0, "", out)
	if string(out) != "after\n" {
		t.Errorf("output %q, want %q: Step.Shell must replace the default", out, "after\n")
	}
}

func testWorkdir(t *testing.T, s executor.Session, env Env) {
	res, out := run(t, s, executor.Step{Script: "pwd -P\n"})
	assertResult(t, res, 0, "", out)
	if got := strings.TrimSuffix(string(out), "\n"); got != s.Workdir() {
		t.Errorf("step ran in %q, want Workdir() %q", got, s.Workdir())
	}
}

func testInterleaving(t *testing.T, s executor.Session, env Env) {
	var script, want strings.Builder
	for i := range 300 {
		if i%2 == 0 {
			fmt.Fprintf(&script, "echo out-%d\n", i)
		} else {
			fmt.Fprintf(&script, "echo err-%d >&2\n", i)
		}
		fmt.Fprintf(&want, "%s-%d\n", map[bool]string{true: "out", false: "err"}[i%2 == 0], i)
	}
	res, out := run(t, s, executor.Step{Script: script.String()})
	assertResult(t, res, 0, "", out)
	if string(out) != want.String() {
		t.Errorf("stdout and stderr lost their order:\n got %q\nwant %q", clip(out), clip([]byte(want.String())))
	}
}

// envValues are values that broke runners before: runner-container-hooks
// #61 (a value with '=' cut short) and #74 (values expanded by a shell on
// their way to the step).
var envValues = map[string]string{
	"KN_EQUALS":    "a=b==c=",
	"KN_BRACE":     "${LIB}",
	"KN_SUBST":     "$(id)",
	"KN_BACKTICK":  "`id`",
	"KN_DOLLAR":    "$HOME $1 $@ $$",
	"KN_QUOTES":    `'single' "double" \back\slash`,
	"KN_NEWLINES":  "line1\nline2\r\n\n",
	"KN_UNICODE":   "héllo wörld ✓ 日本語 🚀",
	"KN_SPACES":    "  leading and trailing  ",
	"KN_EMPTY":     "",
	"KN_GLOB":      "* ? [a-z]",
	"KN_PRINTF":    "%s %d %n \\n",
	"KN_SEMICOLON": "x; rm -rf / #",
}

func testEnvByteExact(t *testing.T, s executor.Session, env Env) {
	secret := "sec=ret ${X} $(id) 'q' \"dq\"\nline ✓"
	var script, want strings.Builder
	for _, k := range slices.Sorted(maps.Keys(envValues)) {
		fmt.Fprintf(&script, "printf '%%s=[%%s]\\n' %s \"$%s\"\n", k, k)
		fmt.Fprintf(&want, "%s=[%s]\n", k, envValues[k])
	}
	script.WriteString("printf 'KN_SECRET=[%s]\\n' \"$KN_SECRET\"\n")
	fmt.Fprintf(&want, "KN_SECRET=[%s]\n", secret)
	res, out := run(t, s, executor.Step{
		Script:  script.String(),
		Env:     envValues,
		Secrets: map[string]string{"KN_SECRET": secret},
	})
	assertResult(t, res, 0, "", out)
	if string(out) != want.String() {
		t.Errorf("variables changed on their way to the step:\n got %q\nwant %q", out, want.String())
	}
}

func testRunnerEnvNotVisible(t *testing.T, s executor.Session, env Env) {
	key := "KNOTLESS_SUITE_LEAK_" + strings.ToUpper(randHex(t, 4))
	val := "leaked-" + randHex(t, 8)
	t.Setenv(key, val)
	res, out := run(t, s, executor.Step{
		Script: "env\necho \"probe=[${" + key + "-unset}]\"\n",
		Env:    map[string]string{"KN_VISIBLE": "yes"},
	})
	assertResult(t, res, 0, "", out)
	if bytes.Contains(out, []byte(key)) || bytes.Contains(out, []byte(val)) {
		t.Errorf("the runner's own variable %s reached the step:\n%s", key, out)
	}
	if !bytes.Contains(out, []byte("probe=[unset]\n")) {
		t.Errorf("the step sees %s set; output %q", key, out)
	}
	if !bytes.Contains(out, []byte("KN_VISIBLE=yes\n")) {
		t.Errorf("the step's own variable is missing from its environment: %q", out)
	}
}

func testNeverInArgv(t *testing.T, s executor.Session, env Env) {
	requireProcs(t, env)
	if env.NewGate == nil {
		t.Skip("the executor's Env has no gate")
	}
	gate := env.NewGate(t)
	marker := "knotless-script-marker-" + randHex(t, 12)
	secret := "knotless-secret-" + randHex(t, 12)
	script := fmt.Sprintf("# %s\nmarker='%s'\necho \"ready $$\"\n%s\nprintf 'secret=[%%s]\\n' \"$KN_TOKEN\"\n", marker, marker, gate.Wait)
	var out output
	ctx, cancel := context.WithTimeout(context.Background(), stepDeadline)
	defer cancel()
	ch := start(ctx, s, executor.Step{Script: script, Secrets: map[string]string{"KN_TOKEN": secret}}, &out)
	pid := atoi(t, out.waitLine(t, "ready ")[0])

	ps := procs(t, env)
	sawShell := false
	for _, p := range ps {
		if p.PID == pid {
			sawShell = true
		}
		if bytes.Contains(p.Argv, []byte(marker)) {
			t.Errorf("process %d has the step's script in its argv: %q", p.PID, p.Argv)
		}
		if bytes.Contains(p.Argv, []byte(secret)) {
			t.Errorf("process %d has the secret in its argv: %q", p.PID, p.Argv)
		}
	}
	if !sawShell {
		t.Errorf("the step's shell (pid %d) is not among the %d processes listed: the scan proves nothing", pid, len(ps))
	}
	gate.Open(t)
	res := await(t, ch)
	assertResult(t, res, 0, "", out.Bytes())
	if !bytes.Contains(out.Bytes(), []byte("secret=["+secret+"]\n")) {
		t.Errorf("the step did not see the secret as an environment variable: %q", out.Bytes())
	}
}

// backgroundPids parses "pids $$ $!" into the shell's PID (also its process
// group) and the background process's PID.
func backgroundPids(t *testing.T, out *output) (shell, bg int) {
	f := out.waitLine(t, "pids ")
	if len(f) != 2 {
		t.Fatalf("bad pids line %q", f)
	}
	return atoi(t, f[0]), atoi(t, f[1])
}

func testTimeoutIgnoringTERM(t *testing.T, s executor.Session, env Env) {
	step := executor.Step{
		Script: "trap '' TERM\nsleep 1000 &\necho \"pids $$ $!\"\nwait\nwait\necho survived\n",
		// The timeout must not fire before the trap is set, also on a
		// loaded machine; the shell reaches it within milliseconds.
		Timeout: 1500 * time.Millisecond,
		Grace:   500 * time.Millisecond,
	}
	var out output
	res := await(t, start(context.Background(), s, step, &out))
	assertResult(t, res, 137, api.ReasonTimeout, out.Bytes())
	if res.Duration < step.Timeout+step.Grace {
		t.Errorf("step ended after %v, before timeout %v plus grace %v", res.Duration, step.Timeout, step.Grace)
	}
	if bytes.Contains(out.Bytes(), []byte("survived")) {
		t.Errorf("the step went on after its timeout: %q", out.Bytes())
	}
	if env.Procs != nil {
		shell, bg := backgroundPids(t, &out)
		assertGone(t, env, []int{shell, bg}, []int{shell})
	}
}

func testCancel(t *testing.T, s executor.Session, env Env) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out output
	ch := start(ctx, s, executor.Step{Script: "sleep 1000 &\necho \"pids $$ $!\"\nwait\n", Grace: 20 * time.Second}, &out)
	shell, bg := backgroundPids(t, &out)
	cancel()
	res := await(t, ch)
	assertResult(t, res, 143, api.ReasonCancelled, out.Bytes())
	if res.Duration > 15*time.Second {
		t.Errorf("a step that dies on SIGTERM took %v to end: it was not sent SIGTERM first", res.Duration)
	}
	if env.Procs != nil {
		assertGone(t, env, []int{shell, bg}, []int{shell})
	}
}

func testCancelTrapped(t *testing.T, s executor.Session, env Env) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out output
	ch := start(ctx, s, executor.Step{Script: "trap 'echo trapped; exit 0' TERM\nsleep 1000 &\necho \"pids $$ $!\"\nwait\n", Grace: 20 * time.Second}, &out)
	shell, bg := backgroundPids(t, &out)
	cancel()
	res := await(t, ch)
	assertResult(t, res, 0, api.ReasonCancelled, out.Bytes())
	if !bytes.Contains(out.Bytes(), []byte("trapped\n")) {
		t.Errorf("the step's TERM trap did not run: %q", out.Bytes())
	}
	if env.Procs != nil {
		assertGone(t, env, []int{shell, bg}, []int{shell})
	}
}

// testContextDeadline: a run's timeout reaches Exec as ctx's deadline and
// must end the step as a timeout, not as a cancel.
func testContextDeadline(t *testing.T, s executor.Session, env Env) {
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	var out output
	res := await(t, start(ctx, s, executor.Step{Script: "sleep 1000 &\necho \"pids $$ $!\"\nwait\n", Grace: 20 * time.Second}, &out))
	assertResult(t, res, 143, api.ReasonTimeout, out.Bytes())
	if env.Procs != nil {
		shell, bg := backgroundPids(t, &out)
		assertGone(t, env, []int{shell, bg}, []int{shell})
	}
}

// testBackground pins gitlab-runner #2880: a process left in the background
// kept the step open (it holds the output pipe) or survived it.
func testBackground(t *testing.T, s executor.Session, env Env, redirect string) {
	var out output
	ctx, cancel := context.WithTimeout(context.Background(), stepDeadline)
	defer cancel()
	res := await(t, start(ctx, s, executor.Step{Script: "sleep 1000 " + redirect + " &\necho \"pids $$ $!\"\necho done\n"}, &out))
	assertResult(t, res, 0, "", out.Bytes())
	if !bytes.HasSuffix(out.Bytes(), []byte("done\n")) {
		t.Errorf("output %q, want it to end with %q", out.Bytes(), "done\n")
	}
	if res.Duration > 30*time.Second {
		t.Errorf("the step took %v: the background process held it open", res.Duration)
	}
	if env.Procs != nil {
		shell, bg := backgroundPids(t, &out)
		assertGone(t, env, []int{shell, bg}, []int{shell})
	}
}

func testBackgroundRedirected(t *testing.T, s executor.Session, env Env) {
	testBackground(t, s, env, ">/dev/null 2>&1")
}

func testBackgroundHoldingOutput(t *testing.T, s executor.Session, env Env) {
	testBackground(t, s, env, "")
}

// copyInBytes puts data into the session as file name (relative to Workdir).
func copyInBytes(t *testing.T, s executor.Session, name string, data []byte) {
	t.Helper()
	src := writeTemp(t, data)
	if err := s.CopyIn(context.Background(), src, name); err != nil {
		t.Fatalf("CopyIn: %v", err)
	}
}

func testLargeOutput(t *testing.T, s executor.Session, env Env) {
	data := randBytes(t, 10<<20)
	copyInBytes(t, s, "big.bin", data)
	res, out := run(t, s, executor.Step{Script: "cat big.bin\necho end >&2\n"})
	assertResult(t, res, 0, "", nil)
	want := slices.Concat(data, []byte("end\n"))
	if !bytes.Equal(out, want) {
		t.Errorf("10 MB of output changed: got %d bytes, want %d; first difference at %d", len(out), len(want), firstDiff(out, want))
	}
}

func testLongLine(t *testing.T, s executor.Session, env Env) {
	line := randBytes(t, 1<<20)
	for i, b := range line {
		if b == '\n' {
			line[i] = 'n'
		}
	}
	copyInBytes(t, s, "line.bin", line)
	res, out := run(t, s, executor.Step{Script: "printf 'start\\n'\ncat line.bin\n"})
	assertResult(t, res, 0, "", nil)
	want := slices.Concat([]byte("start\n"), line)
	if !bytes.Equal(out, want) {
		t.Errorf("a 1 MB line without a newline changed: got %d bytes, want %d; first difference at %d", len(out), len(want), firstDiff(out, want))
	}
}

func testNonUTF8(t *testing.T, s executor.Session, env Env) {
	res, out := run(t, s, executor.Step{Script: `printf '\377\376\200 \303\050 \355\240\200\n'` + "\n" + `printf '\001\002\033[0m\r\n' >&2` + "\n"})
	assertResult(t, res, 0, "", out)
	want := []byte("\xff\xfe\x80 \xc3\x28 \xed\xa0\x80\n\x01\x02\x1b[0m\r\n")
	if !bytes.Equal(out, want) {
		t.Errorf("bytes changed: got %q, want %q", out, want)
	}
}

func testCleanupTwice(t *testing.T, s executor.Session, env Env) {
	ctx := context.Background()
	if _, out := run(t, s, executor.Step{Script: "true\n"}); len(out) != 0 {
		t.Errorf("unexpected output %q", out)
	}
	if err := s.Cleanup(ctx); err != nil {
		t.Fatalf("first Cleanup: %v", err)
	}
	if err := s.Cleanup(ctx); err != nil {
		t.Fatalf("second Cleanup: %v", err)
	}
	if _, err := s.Exec(ctx, executor.Step{Script: "echo too late\n"}, nil); err == nil {
		t.Errorf("Exec after Cleanup returned no error")
	}
}

func testCleanupDuringExec(t *testing.T, s executor.Session, env Env) {
	var out output
	ctx, cancel := context.WithTimeout(context.Background(), stepDeadline)
	defer cancel()
	ch := start(ctx, s, executor.Step{Script: "trap '' TERM\nsleep 1000 &\necho \"pids $$ $!\"\nwait\n", Grace: time.Minute}, &out)
	shell, bg := backgroundPids(t, &out)
	if err := s.Cleanup(ctx); err != nil {
		t.Fatalf("Cleanup during Exec: %v", err)
	}
	select {
	case r := <-ch:
		if r.err == nil && r.res.ExitCode == 0 && r.res.Reason == "" {
			t.Errorf("a step stopped by Cleanup reports success: %+v", r.res)
		}
	case <-time.After(pollDeadline):
		t.Fatalf("Exec did not end within %v of Cleanup", pollDeadline)
	}
	if err := s.Cleanup(ctx); err != nil {
		t.Errorf("second Cleanup: %v", err)
	}
	if env.Procs != nil {
		assertGone(t, env, []int{shell, bg}, []int{shell})
	}
}

func atoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatalf("not a number: %q", s)
	}
	return n
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}
