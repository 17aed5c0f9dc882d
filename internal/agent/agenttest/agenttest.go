// Package agenttest builds the step agent (cmd/knotless-agent) for tests,
// once per test binary, as a static program like the release build.
package agenttest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
)

var (
	once     sync.Once
	binPath  string
	errBuild error

	crossMu sync.Mutex
	cross   = map[string]string{} // GOARCH → built path
)

// WithArch returns the path of a knotless-agent beside which a
// knotless-agent-linux-ARCH is built for each of arches (cross-compiled,
// CGO off), as a release lays them out: a runner given the returned path
// finds them all. Each is built once per test binary.
func WithArch(t testing.TB, arches ...string) string {
	t.Helper()
	host := Binary(t)
	dir := t.TempDir()
	out := filepath.Join(dir, "knotless-agent")
	if err := os.Symlink(host, out); err != nil {
		t.Fatal(err)
	}
	for _, arch := range arches {
		crossMu.Lock()
		p, ok := cross[arch]
		if !ok {
			root, err := moduleRoot()
			if err == nil {
				p = filepath.Join(filepath.Dir(host), "knotless-agent-linux-"+arch)
				cmd := buildCommand(p)
				cmd.Dir = root
				cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+arch)
				if b, berr := cmd.CombinedOutput(); berr != nil {
					err = fmt.Errorf("GOARCH=%s go build ./cmd/knotless-agent: %v\n%s", arch, berr, strings.TrimSpace(string(b)))
				}
			}
			if err != nil {
				crossMu.Unlock()
				t.Fatal(err)
			}
			cross[arch] = p
		}
		crossMu.Unlock()
		if err := os.Symlink(p, filepath.Join(dir, "knotless-agent-linux-"+arch)); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// ReleaseFlags are the `go build` flags of the released step agent (the
// Makefile's LDFLAGS but its version) followed by extra linker flags:
// trimmed paths, no symbol table and no DWARF (-s -w). A test's agent is
// then the size a runner sends (4.4 MB, not 6.6), which the kube
// executor's delivery benchmarks measure.
func ReleaseFlags(ldflags ...string) []string {
	return []string{"-trimpath", "-ldflags", strings.Join(append([]string{"-s", "-w"}, ldflags...), " ")}
}

// buildCommand is `go build` of the step agent into out with
// ReleaseFlags; the caller sets its directory and environment.
func buildCommand(out string) *exec.Cmd {
	return exec.Command(goTool(), slices.Concat([]string{"build"}, ReleaseFlags(), []string{"-o", out, "./cmd/knotless-agent"})...)
}

func goTool() string {
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	return "/usr/local/go/bin/go"
}

// Binary returns the path of a knotless-agent built from this module's
// source (CGO off, ReleaseFlags). It is built once per test binary, into a directory
// that lives as long as the process; a build failure fails the test.
func Binary(t testing.TB) string {
	t.Helper()
	p, err := Build()
	if err != nil {
		t.Fatalf("build knotless-agent: %v", err)
	}
	return p
}

// Build is Binary for a TestMain (no testing.TB): it returns the path or
// the build's error.
func Build() (string, error) {
	once.Do(func() { binPath, errBuild = build() })
	return binPath, errBuild
}

func build() (string, error) {
	root, err := moduleRoot()
	if err != nil {
		return "", err
	}
	dir, err := os.MkdirTemp("", "knotless-agent-test-")
	if err != nil {
		return "", err
	}
	out := filepath.Join(dir, "knotless-agent")
	cmd := buildCommand(out)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/knotless-agent: %v\n%s", err, strings.TrimSpace(string(b)))
	}
	return out, nil
}

func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			if b, _ := os.ReadFile(filepath.Join(dir, "go.mod")); strings.HasPrefix(string(b), "module knotless.dev/knotless\n") {
				return dir, nil
			}
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no go.mod of knotless.dev/knotless above %s", dir)
		}
		dir = parent
	}
}
