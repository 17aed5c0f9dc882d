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

func (*fakeOptions) Name() string  { return "fake" }
func (*fakeOptions) UsesJob() bool { return false }
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
	executors = append(append([]func() executor.Options(nil), saved...), func() executor.Options { return &fakeOptions{} })
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

// TestExecutorFlags_FlagOfTwoExecutorsPanics pins the rule that keeps
// executors' flags apart: a flag means one thing, so two executors never
// add one name (what several share is executor.JobFlags).
func TestExecutorFlags_FlagOfTwoExecutorsPanics(t *testing.T) {
	defer func() {
		if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), "executor bad adds flag --level, which the command or another executor has already") {
			t.Errorf("recovered %v", r)
		}
	}()
	saved := executors
	executors = []func() executor.Options{func() executor.Options { return badOptions{} }, func() executor.Options { return badOptions{} }}
	defer func() { executors = saved }()
	addExecutorFlags(pflag.NewFlagSet("x", pflag.ContinueOnError), "where")
}

// jobOptions is an executor that runs images: New fails, saying what
// the job flags gave it.
type jobOptions struct{}

func (jobOptions) Name() string               { return "jobby" }
func (jobOptions) UsesJob() bool              { return true }
func (jobOptions) AddFlags(fs *pflag.FlagSet) {}
func (jobOptions) New(s executor.Setup) (executor.Executor, error) {
	return nil, fmt.Errorf("jobby made with image %s, cpus %s, memory %d, run-as %s", s.Job.Image, s.Job.CPUs, s.Job.Memory, s.Job.RunAs)
}

// TestExecutorFlags_JobFlagsReachEveryExecutorThatRunsImages: the shared
// --image, --cpus, --memory and --run-as are on the command line once,
// their help names every executor that reads them, and their values (from
// the command line or the environment) reach the chosen one in
// Setup.Job; the shell executor, which runs no image, warns that it
// ignores them.
func TestExecutorFlags_JobFlagsReachEveryExecutorThatRunsImages(t *testing.T) {
	saved := executors
	executors = append(append([]func() executor.Options(nil), saved...), func() executor.Options { return jobOptions{} })
	t.Cleanup(func() { executors = saved })
	work := t.TempDir()
	code, _, errb := mainInProcess("exec", "ci.yml", "--work", work, "--executor", "jobby", "--image", "img:1", "--memory", "1Gi", "--run-as", "7:8")
	if code != 1 || !strings.Contains(errb, "jobby made with image img:1, cpus 1, memory 1073741824, run-as 7:8") {
		t.Errorf("flags: exit %d, stderr %q", code, errb)
	}
	t.Setenv("KNOTLESS_CPUS", "500m")
	code, _, errb = mainInProcess("exec", "ci.yml", "--work", work, "--executor", "jobby")
	if code != 1 || !strings.Contains(errb, "jobby made with image , cpus 500m, memory 2147483648, run-as 1000:1000") {
		t.Errorf("environment: exit %d, stderr %q", code, errb)
	}
	code, _, errb = mainInProcess("exec", "ci.yml", "--work", work, "--executor", "jobby", "--cpus", "0")
	if code != 2 || !strings.Contains(errb, "--cpus") {
		t.Errorf("bad --cpus: exit %d, stderr %q", code, errb)
	}
	_, out, _ := mainInProcess("exec", "--help")
	if !strings.Contains(out, "(--executor kube, docker, jobby) [env KNOTLESS_IMAGE]") {
		t.Errorf("--help does not name the executors of --image:\n%s", out)
	}
	code, _, errb = mainInProcess("exec", "missing.yml", "--work", work, "--image", "img:1")
	if code != 2 || !strings.Contains(errb, "--image is a flag of the kube, docker and jobby executors: --executor shell ignores it") {
		t.Errorf("shell: exit %d, stderr %q", code, errb)
	}
}

type badOptions struct{}

func (badOptions) Name() string                 { return "bad" }
func (badOptions) UsesJob() bool                { return false }
func (o badOptions) AddFlags(fs *pflag.FlagSet) { fs.Bool("level", false, "") }
func (badOptions) New(executor.Setup) (executor.Executor, error) {
	return nil, errors.New("unused")
}
