package runnercli

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/spf13/pflag"

	"knotless.dev/knotless/internal/executor"
	"knotless.dev/knotless/internal/syncbuf"
)

// fakeOptions is an executor whose New fails, saying the value of its one
// flag: enough to see the flag reach it.
type fakeOptions struct{ level int }

func (*fakeOptions) Name() string { return "fake" }
func (o *fakeOptions) AddFlags(fs *pflag.FlagSet) {
	fs.IntVar(&o.level, "fake-level", 1, "how fake")
}
func (o *fakeOptions) New(executor.Setup) (executor.Executor, error) {
	return nil, fmt.Errorf("fake executor made with level %d", o.level)
}

// withFakeExecutor registers fakeOptions after the real executors until the
// test ends.
func withFakeExecutor(t *testing.T) {
	saved := executors
	executors = append(append([]func() ExecutorOptions(nil), saved...), func() ExecutorOptions { return &fakeOptions{} })
	t.Cleanup(func() { executors = saved })
}

func mainInProcess(args ...string) (code int, stdout, stderr string) {
	var out, errb syncbuf.Buffer
	code = Main(args, &out, &errb)
	return code, out.String(), errb.String()
}

func TestExecutorFlags_HelpNamesEnvAndExecutorOfEachFlag(t *testing.T) {
	withFakeExecutor(t)
	for _, cmd := range []string{"run", "exec"} {
		_, out, _ := mainInProcess(cmd, "--help")
		for _, want := range []string{
			": shell, kube, docker, fake [env KNOTLESS_EXECUTOR] (default \"shell\")",
			"--fake-level int",
			"how fake (only with --executor fake) [env KNOTLESS_FAKE_LEVEL] (default 1)",
		} {
			if !strings.Contains(out, want) {
				t.Errorf("%s --help lacks %q:\n%s", cmd, want, out)
			}
		}
	}
}

func TestExecutorFlags_FlagAndEnvReachTheChosenExecutor(t *testing.T) {
	withFakeExecutor(t)
	work := t.TempDir()
	code, _, errb := mainInProcess("exec", "ci.yml", "--work", work, "--executor", "fake", "--fake-level", "7")
	if code != 1 || !strings.Contains(errb, "fake executor made with level 7") {
		t.Errorf("flag: exit %d, stderr %q", code, errb)
	}
	t.Setenv("KNOTLESS_EXECUTOR", "fake")
	t.Setenv("KNOTLESS_FAKE_LEVEL", "9")
	code, _, errb = mainInProcess("run", "--state", "s.json", "--work", work)
	if code != 1 || !strings.Contains(errb, "fake executor made with level 9") {
		t.Errorf("environment: exit %d, stderr %q", code, errb)
	}
}

func TestExecutorFlags_FlagOfAnotherExecutorIsIgnoredWithAWarning(t *testing.T) {
	withFakeExecutor(t)
	// The shell executor runs; the workflow file is missing, so nothing runs.
	code, _, errb := mainInProcess("exec", "missing.yml", "--work", t.TempDir(), "--fake-level", "3")
	if code != 2 || !strings.Contains(errb, "--fake-level is a flag of the fake executor: --executor shell ignores it") {
		t.Errorf("exit %d, stderr %q", code, errb)
	}
	// From the environment: no warning (one environment may serve several runners).
	t.Setenv("KNOTLESS_FAKE_LEVEL", "3")
	code, _, errb = mainInProcess("exec", "missing.yml", "--work", t.TempDir())
	if code != 2 || strings.Contains(errb, "fake-level") {
		t.Errorf("from the environment: exit %d, stderr %q", code, errb)
	}
}

func TestExecutorFlags_UnknownExecutorListsTheRegisteredOnes(t *testing.T) {
	withFakeExecutor(t)
	code, _, errb := mainInProcess("run", "--state", "s", "--work", t.TempDir(), "--executor", "nope")
	if code != 2 || !strings.Contains(errb, `unknown executor "nope" (available: shell, kube, docker, fake)`) {
		t.Errorf("exit %d, stderr %q", code, errb)
	}
}

// TestExecutorFlags_FlagOfTwoExecutorsWithAnotherDefaultPanics pins the
// rule that keeps executors' flags apart: two executors may add one flag
// name only with one type and default (one meaning, as --image of kube and
// docker).
func TestExecutorFlags_FlagOfTwoExecutorsWithAnotherDefaultPanics(t *testing.T) {
	defer func() {
		if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), "executor bad adds flag --level, which bad has already with another type or default") {
			t.Errorf("recovered %v", r)
		}
	}()
	saved := executors
	executors = []func() ExecutorOptions{func() ExecutorOptions { return badOptions{} }, func() ExecutorOptions { return badOptions{def: true} }}
	defer func() { executors = saved }()
	addExecutorFlags(pflag.NewFlagSet("x", pflag.ContinueOnError), "where")
}

// fake2Options shares fakeOptions' --fake-level.
type fake2Options struct{ fakeOptions }

func (*fake2Options) Name() string { return "fake2" }
func (o *fake2Options) New(executor.Setup) (executor.Executor, error) {
	return nil, fmt.Errorf("fake2 executor made with level %d", o.level)
}

// TestExecutorFlags_SharedFlagReachesTheSecondExecutor: a flag two
// executors share (the first owns it on the command line) reaches the
// second when it is chosen, from the command line and the environment.
func TestExecutorFlags_SharedFlagReachesTheSecondExecutor(t *testing.T) {
	saved := executors
	executors = append(append([]func() ExecutorOptions(nil), saved...),
		func() ExecutorOptions { return &fakeOptions{} }, func() ExecutorOptions { return &fake2Options{} })
	t.Cleanup(func() { executors = saved })
	work := t.TempDir()
	code, _, errb := mainInProcess("exec", "ci.yml", "--work", work, "--executor", "fake2", "--fake-level", "5")
	if code != 1 || !strings.Contains(errb, "fake2 executor made with level 5") {
		t.Errorf("flag: exit %d, stderr %q", code, errb)
	}
	t.Setenv("KNOTLESS_FAKE_LEVEL", "6")
	code, _, errb = mainInProcess("exec", "ci.yml", "--work", work, "--executor", "fake2")
	if code != 1 || !strings.Contains(errb, "fake2 executor made with level 6") {
		t.Errorf("environment: exit %d, stderr %q", code, errb)
	}
	_, out, _ := mainInProcess("exec", "--help")
	if !strings.Contains(out, "how fake (--executor fake); how fake (--executor fake2) [env KNOTLESS_FAKE_LEVEL]") {
		t.Errorf("--help does not name both executors of --fake-level:\n%s", out)
	}
}

type badOptions struct{ def bool }

func (badOptions) Name() string                 { return "bad" }
func (o badOptions) AddFlags(fs *pflag.FlagSet) { fs.Bool("level", o.def, "") }
func (badOptions) New(executor.Setup) (executor.Executor, error) {
	return nil, errors.New("unused")
}
