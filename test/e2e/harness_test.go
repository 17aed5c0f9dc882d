package e2e

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"knotless.dev/knotless/internal/agent/agenttest"
)

// Paths set by TestMain.
var (
	moduleRoot string // the directory holding go.mod
	binDir     string // the three programs, built for this test binary
	goTool     string // the go command that built them
)

// Program paths inside binDir.
func serverBin() string { return filepath.Join(binDir, "knotless-server") }
func runnerBin() string { return filepath.Join(binDir, "knotless-run") }

// upgradeBin is knotless-run built again with version UpgradeVersion, with
// its own knotless-agent beside it: the "new release" of upgrade tests.
func upgradeBin() string { return filepath.Join(binDir, "upgrade", "knotless-run") }

// UpgradeVersion is upgradeBin's version.
const UpgradeVersion = "e2e-upgrade"

func cliBin() string { return filepath.Join(binDir, "knotless") }

// TestMain builds knotless, knotless-server and knotless-run once (with
// -race when the test binary has it) and removes them afterwards.
func TestMain(m *testing.M) {
	flag.Parse()
	os.Exit(buildAndRun(m))
}

func buildAndRun(m *testing.M) int {
	var err error
	if moduleRoot, err = findModuleRoot(); err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	if goTool, err = exec.LookPath("go"); err != nil {
		goTool = "/usr/local/go/bin/go"
		if _, err := os.Stat(goTool); err != nil {
			fmt.Fprintln(os.Stderr, "e2e: no go command on PATH or at /usr/local/go/bin/go")
			return 1
		}
	}
	dir, err := os.MkdirTemp("", "knotless-e2e-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	binDir = dir
	args := []string{"build"}
	if raceEnabled {
		args = append(args, "-race")
	}
	args = append(args, "-o", dir+string(filepath.Separator), "./cmd/knotless", "./cmd/knotless-server", "./cmd/knotless-run")
	build := exec.Command(goTool, args...)
	build.Dir = moduleRoot
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "e2e: go %s: %v\n%s", strings.Join(args, " "), err, out)
		return 1
	}
	// The step agent is static (no cgo, so no -race), as released; the
	// upgrade build is a second knotless-run and agent with another version.
	// Both agents are built as released (agenttest.ReleaseFlags), so a
	// delivery moves the bytes it moves for users.
	upgradeFlags := "-X knotless.dev/knotless/internal/version.Version=" + UpgradeVersion
	for _, b := range []struct {
		args []string
		cgo  bool
	}{
		{slices.Concat([]string{"build"}, agenttest.ReleaseFlags(), []string{"-o", filepath.Join(dir, "knotless-agent"), "./cmd/knotless-agent"}), false},
		{slices.Concat([]string{"build"}, agenttest.ReleaseFlags(upgradeFlags), []string{"-o", filepath.Join(dir, "upgrade", "knotless-agent"), "./cmd/knotless-agent"}), false},
		{[]string{"build", "-ldflags", upgradeFlags, "-o", filepath.Join(dir, "upgrade", "knotless-run"), "./cmd/knotless-run"}, true},
	} {
		build = exec.Command(goTool, b.args...)
		build.Dir = moduleRoot
		if !b.cgo {
			build.Env = append(os.Environ(), "CGO_ENABLED=0")
		}
		if out, err := build.CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "e2e: go %s: %v\n%s", strings.Join(b.args, " "), err, out)
			return 1
		}
	}
	code := m.Run()
	// No test may leave a process behind (a step agent that waited an
	// hour for a runner that was gone, issue 39): after every test's
	// cleanup, a process of this package's programs that outlives a grace
	// fails the package, named, and is killed.
	if left := leftoverProcesses(dir, 15*time.Second); len(left) > 0 {
		fmt.Fprintf(os.Stderr, "e2e: %d process(es) of the tests' programs outlived every test (killed now):\n%s", len(left), strings.Join(left, "\n"))
		code = 1
	}
	return code
}

// leftoverProcesses waits up to grace for every process whose program is
// below dir (/proc/PID/exe) to end, then kills those left and returns
// them, each as "PID: its command line".
func leftoverProcesses(dir string, grace time.Duration) []string {
	find := func() map[int]string {
		out := map[int]string{}
		for pid, cmdline := range procFiles("cmdline") {
			exe, err := os.Readlink(filepath.Join("/proc", strconv.Itoa(pid), "exe"))
			if err != nil || !strings.HasPrefix(exe, dir+string(filepath.Separator)) {
				continue
			}
			out[pid] = strings.Join(strings.Split(strings.TrimRight(string(cmdline), "\x00"), "\x00"), " ")
		}
		return out
	}
	deadline := time.Now().Add(grace)
	left := find()
	for len(left) > 0 && time.Now().Before(deadline) {
		time.Sleep(200 * time.Millisecond)
		left = find()
	}
	var out []string
	for pid, cmd := range left {
		_ = syscall.Kill(pid, syscall.SIGKILL)
		out = append(out, fmt.Sprintf("%d: %s", pid, cmd))
	}
	sort.Strings(out)
	return out
}

// findModuleRoot walks up from the working directory (the test's package
// directory under go test) to the directory holding go.mod.
func findModuleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod above the test's directory")
		}
		dir = parent
	}
}

// baseEnv is the environment every process of a test starts from: PATH
// (with the go command's directory, for the demo and steps that need go),
// HOME, and git kept away from the machine's configuration.
func baseEnv(home string) []string {
	path := os.Getenv("PATH")
	if path == "" {
		path = "/usr/local/bin:/usr/bin:/bin"
	}
	path += string(os.PathListSeparator) + filepath.Dir(goTool)
	env := []string{"PATH=" + path, "HOME=" + home, "LANG=C.UTF-8",
		"GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null", "GIT_TERMINAL_PROMPT=0"}
	if tmp := os.Getenv("TMPDIR"); tmp != "" {
		env = append(env, "TMPDIR="+tmp)
	}
	// The Docker executor's runners reach the tests' engine.
	if h := os.Getenv("DOCKER_HOST"); h != "" {
		env = append(env, "DOCKER_HOST="+h)
	}
	return env
}

// proc is a program started by a test. Its standard output and error go to
// one log file, printed when the test fails. The test's cleanup kills it.
type proc struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	done    chan struct{} // closed when the process has exited
	waitErr error         // set before done closes
}

var procSeq atomic.Int64

// startProc starts bin with args and env (no other variables) in dir.
func startProc(t testing.TB, name string, env []string, dir string, bin string, args ...string) *proc {
	t.Helper()
	logPath := filepath.Join(t.TempDir(), fmt.Sprintf("%s-%d.log", name, procSeq.Add(1)))
	f, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cmd := exec.Command(bin, args...)
	cmd.Env, cmd.Dir, cmd.Stdout, cmd.Stderr = env, dir, f, f
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	p := &proc{name: name, cmd: cmd, logPath: logPath, done: make(chan struct{})}
	go func() {
		p.waitErr = cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		p.kill()
		out := p.output()
		if raceEnabled && strings.Contains(out, "WARNING: DATA RACE") {
			t.Errorf("%s (pid %d) reported a data race:\n%s", p.name, p.pid(), out)
		} else if t.Failed() {
			t.Logf("──── output of %s (pid %d, %s) ────\n%s", p.name, p.pid(), strings.Join(cmd.Args, " "), out)
		}
	})
	return p
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

// output returns what the process wrote so far.
func (p *proc) output() string {
	b, _ := os.ReadFile(p.logPath)
	return string(b)
}

func (p *proc) signal(t testing.TB, sig syscall.Signal) {
	t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		t.Fatalf("signal %s to %s: %v", sig, p.name, err)
	}
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// wait waits up to d for the process to exit and returns its exit code (-1
// when a signal ended it).
func (p *proc) wait(t testing.TB, d time.Duration) int {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(d):
		t.Fatalf("%s (pid %d) did not exit within %s", p.name, p.pid(), d)
	}
	var ee *exec.ExitError
	switch {
	case p.waitErr == nil:
		return 0
	case errors.As(p.waitErr, &ee):
		return ee.ExitCode()
	}
	t.Fatalf("wait for %s: %v", p.name, p.waitErr)
	return -1
}

// kill ends the process with SIGKILL (if it still runs) and waits for it.
func (p *proc) kill() {
	if p.exited() {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
	}
}

// fileExists reports whether path exists.
func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// procFiles reads /proc/PID/name of every process (those that vanish or
// cannot be read are left out): pid → contents.
func procFiles(name string) map[int][]byte {
	out := map[int][]byte{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), name))
		if err != nil {
			continue
		}
		out[pid] = b
	}
	return out
}

// pidsWithArg returns the processes whose command line has arg as one of
// its arguments.
func pidsWithArg(arg string) []int {
	var pids []int
	for pid, cmdline := range procFiles("cmdline") {
		for _, a := range bytes.Split(cmdline, []byte{0}) {
			if string(a) == arg {
				pids = append(pids, pid)
				break
			}
		}
	}
	return pids
}

// killTagged kills every process whose environment holds the variable tag
// (NAME=VALUE): what the steps of one test left running, however they
// ended. It returns the pids it killed.
func killTagged(tag string) []int {
	var killed []int
	for pid, environ := range procFiles("environ") {
		for _, kv := range bytes.Split(environ, []byte{0}) {
			if string(kv) == tag {
				if syscall.Kill(pid, syscall.SIGKILL) == nil {
					killed = append(killed, pid)
				}
				break
			}
		}
	}
	return killed
}

// killAgentsUnder kills every knotless-agent whose state directory is
// below root (what a test's runners left running) and returns their pids.
func killAgentsUnder(root string) []int {
	var killed []int
	for pid, cmdline := range procFiles("cmdline") {
		args := bytes.Split(cmdline, []byte{0})
		if len(args) < 2 || filepath.Base(string(args[0])) != "knotless-agent" || string(args[1]) != "serve" {
			continue
		}
		for i, a := range args {
			if string(a) == "--dir" && i+1 < len(args) && strings.HasPrefix(string(args[i+1]), root+"/") {
				if syscall.Kill(pid, syscall.SIGKILL) == nil {
					killed = append(killed, pid)
				}
				break
			}
		}
	}
	return killed
}

// randomHex returns n random bytes as hex (for unique names and values).
func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	return hex.EncodeToString(b)
}
