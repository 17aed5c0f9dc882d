package e2e

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"knotless.dev/knotless/internal/testwait"
	"knotless.dev/knotless/test/dockertest"
)

var exportName = regexp.MustCompile(`(?m)^export ([A-Z_]+)=`)

// guidePreamble starts every guide's script: it stops and waits for the
// background programs (knotless-run with SIGTERM, so that it hands its runs
// over as an upgrade would; others with SIGINT) and waits until one says it
// is ready.
const guidePreamble = `set -euxo pipefail
declare -A _bg=()
_bg_stop() {
	local pid=${_bg[$1]:-}
	[ -n "$pid" ] || return 0
	if [ "$1" = knotless-run ]; then kill -TERM "$pid" 2>/dev/null || true; else kill -INT "$pid" 2>/dev/null || true; fi
	wait "$pid" 2>/dev/null || true
	unset "_bg[$1]"
}
_bg_ready() {
	local ready
	case $1 in
	knotless-server) ready='server ready' ;;
	knotless-run) ready='runner started' ;;
	*) return 0 ;;
	esac
	for _ in $(seq 600); do
		grep -q "$ready" "$3" && return 0
		kill -0 "$2" 2>/dev/null || { echo "$1 exited before it was ready:"; cat "$3"; return 1; }
		sleep 0.05
	done
	echo "$1 not ready within 30 s:"; cat "$3"; return 1
}
trap 'for k in "${!_bg[@]}"; do _bg_stop "$k"; done' EXIT
`

// guideScript is one bash script of the blocks of pages (module-relative,
// in order) marked test or test: background. vars are the test's values
// for the names the pages' values blocks export: the same names, checked.
// Background programs log to logs/bg-N.log.
func guideScript(t *testing.T, logs string, vars map[string]string, pages ...string) string {
	t.Helper()
	var script strings.Builder
	script.WriteString(guidePreamble)
	var asked []string
	n := 0
	for _, page := range pages {
		for _, b := range docBlocks(t, page) {
			if b.lang != "sh" {
				continue
			}
			fmt.Fprintf(&script, ": '### %s:%d'\n", b.doc, b.line)
			switch b.marker {
			case "test: values":
				for _, m := range exportName.FindAllStringSubmatch(b.text, -1) {
					asked = append(asked, m[1])
				}
			case "test":
				script.WriteString(b.text)
			case "test: background":
				cmd := strings.TrimSpace(strings.ReplaceAll(b.text, "\\\n", " "))
				prog := strings.Fields(cmd)[0]
				if strings.Contains(cmd, "\n") || prog == "sudo" {
					t.Fatalf("%s:%d: a background block must be one command of ours", b.doc, b.line)
				}
				n++
				log := filepath.Join(logs, fmt.Sprintf("bg-%d.log", n))
				fmt.Fprintf(&script, "_bg_stop %s\n( exec %s ) > %q 2>&1 &\n_bg[%s]=$!\n_bg_ready %s $! %q\n",
					prog, cmd, log, prog, prog, log)
			}
		}
	}
	var set []string
	for k := range vars {
		set = append(set, k)
	}
	sort.Strings(asked)
	sort.Strings(set)
	if strings.Join(asked, " ") != strings.Join(set, " ") {
		t.Fatalf("the guides %v ask the reader to set %v; this test sets %v", pages, asked, set)
	}
	return script.String()
}

// runGuide runs script in dir with env and vars set, for at most d; on
// failure it shows the script's output and the background programs' logs.
func runGuide(t *testing.T, dir, logs, script string, env []string, vars map[string]string, d time.Duration) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-c", script)
	cmd.Dir = dir
	cmd.Env = env
	for k, v := range vars {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	// On timeout: SIGTERM lets the script's trap stop what it started.
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 30 * time.Second
	out, err := cmd.CombinedOutput()
	if err != nil {
		var bg strings.Builder
		files, _ := filepath.Glob(filepath.Join(logs, "bg-*.log"))
		for _, f := range files {
			b, _ := os.ReadFile(f)
			fmt.Fprintf(&bg, "--- %s:\n%s", filepath.Base(f), b)
		}
		t.Fatalf("the guides' commands failed: %v\n%s\n%s", err, out, bg.String())
	}
	return string(out)
}

// freeAddr is a loopback address nothing listens on (just now).
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// noProcessLeftIn fails the test when a process whose command line names
// dir (a test's directory, removed by now) is still there after wait:
// what a test started must not outlive it.
func noProcessLeftIn(t *testing.T, dir string, wait time.Duration) {
	t.Helper()
	if dir == "" {
		return
	}
	var left []string
	testwait.UntilEvery(t, wait, 500*time.Millisecond, "no process of "+dir, func() (bool, string) {
		left = left[:0]
		procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
		for _, p := range procs {
			if b, err := os.ReadFile(p); err == nil && strings.Contains(string(b), dir) {
				left = append(left, filepath.Base(filepath.Dir(p))+": "+strings.ReplaceAll(string(b), "\x00", " "))
			}
		}
		return len(left) == 0, strings.Join(left, "\n")
	})
}

// guideEnv is a reader's environment: the built programs first in PATH, a
// HOME of its own, git's identity.
func guideEnv(t *testing.T) []string {
	home := t.TempDir()
	env := baseEnv(home)
	for i, kv := range env {
		if strings.HasPrefix(kv, "PATH=") {
			env[i] = "PATH=" + binDir + string(os.PathListSeparator) + strings.TrimPrefix(kv, "PATH=")
		}
	}
	return append(env, "XDG_CONFIG_HOME="+filepath.Join(home, ".config"),
		"GIT_AUTHOR_NAME=Reader", "GIT_AUTHOR_EMAIL=reader@example.com",
		"GIT_COMMITTER_NAME=Reader", "GIT_COMMITTER_EMAIL=reader@example.com")
}

// docs/server.md, docs/runner.md and docs/runs.md, one after the other in
// one shell, as a reader follows them: a server on a loopback address and
// temporary directories, accounts, tokens, a push, a runner registered,
// approved and restarted three times (each taking the runs over), secrets,
// runs followed, triggered and cancelled, outputs fetched.
func TestDocs_ServerRunnerAndRunsGuidesRunAsWritten(t *testing.T) {
	t.Parallel()
	var root string
	// Registered first, so it runs after the temporary directories are
	// removed: the guide ends with a runner handing its run over, whose
	// agent once outlived the test by an hour.
	t.Cleanup(func() { noProcessLeftIn(t, root, 30*time.Second) })
	root = t.TempDir()
	logs := t.TempDir()
	addr := freeAddr(t)
	vars := map[string]string{
		"KNOTLESS_SERVER": "http://" + addr,
		"LISTEN":          addr,
		"DATA":            filepath.Join(root, "data"),
		"STATE":           filepath.Join(root, "etc", "runner.json"),
		"WORK":            filepath.Join(root, "work"),
	}
	if err := os.MkdirAll(filepath.Dir(vars["STATE"]), 0o700); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	// The files runs.md's secrets come from.
	for name, value := range map[string]string{"token.txt": "deploy-token\n", "other.txt": "other-token\n"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(value), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	script := guideScript(t, logs, vars, "docs/server.md", "docs/runner.md", "docs/runs.md")
	out := runGuide(t, dir, logs, script, guideEnv(t), vars, 5*time.Minute)
	t.Logf("the guides' output:\n%s", out)
	for _, want := range []string{"Created repository alice/app.", "Revoked token initial", "hello from "} {
		if !strings.Contains(out, want) {
			t.Errorf("the guides' commands did not print %q:\n%s", want, out)
		}
	}
	if b, err := os.ReadFile(filepath.Join(dir, "out", "hello.txt")); err != nil || !strings.HasPrefix(string(b), "hello from ") {
		t.Errorf("run 1's outputs in out/: %q, %v", b, err)
	}
}

// docs/docker.md's commands against the tests' Docker engine: a runner
// (registered and approved by the test) started with the page's flags, and
// `knotless-run exec` of a one-step workflow in a container.
func TestDocs_DockerGuideRunsAsWritten(t *testing.T) {
	t.Parallel()
	d := newDockerRunner(t)
	w := newWorld(t, 30*time.Second)
	rid := w.registerRunner("docs-docker")
	d.cleanup(t, "docs-docker")
	logs := t.TempDir()
	vars := map[string]string{"STATE": rid.state, "WORK": rid.work, "JOB_IMAGE": dockertest.JobImage}
	// A checkout the job's user (1000) may enter: the directory and its
	// parent searchable by others.
	dir, err := os.MkdirTemp("", "knotless-docs-docker-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	wf := filepath.Join(dir, ".knotless", "workflows", "ci.yml")
	if err := os.MkdirAll(filepath.Dir(wf), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(wf, []byte("steps:\n  - name: hello\n    run: echo \"hello from $(id -u) in a container\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	script := guideScript(t, logs, vars, "docs/docker.md")
	out := runGuide(t, dir, logs, script, guideEnv(t), vars, 5*time.Minute)
	for _, want := range []string{"hello from 1000 in a container", "KNOTLESS_"} {
		if !strings.Contains(out, want) {
			t.Errorf("the guide's commands did not print %q:\n%s", want, out)
		}
	}
}
