//go:build linux

package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"knotless.dev/knotless/internal/testenv"
)

// cliTTY runs the knotless CLI like cli, with its stdout and stderr a
// pseudo-terminal: it returns what the terminal received (with the
// terminal's own \n → \r\n) and the exit code.
func (w *world) cliTTY(args ...string) (string, int) {
	w.t.Helper()
	c, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		testenv.Skipf(w.t, "no pseudo-terminals here: %v", err)
	}
	defer c.Close()
	var n int
	rc, err := c.SyscallConn()
	if err != nil {
		w.t.Fatal(err)
	}
	var ierr error
	if err := rc.Control(func(fd uintptr) {
		if ierr = unix.IoctlSetPointerInt(int(fd), unix.TIOCSPTLCK, 0); ierr == nil {
			n, ierr = unix.IoctlGetInt(int(fd), unix.TIOCGPTN)
		}
	}); err != nil || ierr != nil {
		w.t.Fatalf("set up pty: %v %v", err, ierr)
	}
	term, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		w.t.Fatalf("open pty: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, cliBin(), args...)
	cmd.Dir = w.src
	cmd.Env = append(baseEnv(w.home), "XDG_CONFIG_HOME="+filepath.Join(w.home, ".config"),
		"KNOTLESS_SERVER="+w.url, "KNOTLESS_TOKEN="+w.token)
	cmd.Stdin = strings.NewReader("")
	cmd.Stdout, cmd.Stderr = term, term
	var out bytes.Buffer
	done := make(chan struct{})
	go func() { // read as it comes: a full terminal buffer would block the CLI
		defer close(done)
		buf := make([]byte, 64<<10)
		for {
			k, err := c.Read(buf)
			out.Write(buf[:k])
			if err != nil {
				return
			}
		}
	}()
	err = cmd.Run()
	term.Close() // the controller reads EIO once the output is drained
	<-done
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		w.t.Fatalf("knotless %s: %v", strings.Join(args, " "), err)
	}
	return out.String(), code
}

// sgr is a colour sequence, the one kind that may reach a terminal.
var sgr = regexp.MustCompile(`^\x1b\[[0-9;:]*m`)

// onlySGR reports whether every ESC in s starts an SGR sequence (colours).
func onlySGR(s string) bool {
	for i := strings.IndexByte(s, 0x1b); i >= 0; i = strings.IndexByte(s, 0x1b) {
		if !sgr.MatchString(s[i:]) {
			return false
		}
		s = s[i+1:]
	}
	return !strings.ContainsAny(s, "\a\x9b")
}

// A workflow file named with an escape sequence set the window title and
// colours through run list, run show and run logs, and run logs wrote a
// step's output raw to the terminal (a fake footer, a cleared screen, the
// clipboard, the title). Through the real programs: the file is refused
// by lint and the server alike; on a terminal the CLI shows every control
// sequence but colours escaped; --raw and a pipe keep the bytes.
func TestE2E_TerminalIsNotDrivenByWorkflowFileNamesOrStepOutput(t *testing.T) {
	t.Parallel()
	w := newWorld(t, 5*time.Second)
	w.startRunner(w.registerRunner("r1"))
	escName := ".knotless/workflows/esc\x1b]0;TITLE\a\x1b[31mred.yml"
	files := map[string]string{
		escName: "on:\n  push: {}\nsteps:\n  - run: echo hi\n",
		".knotless/workflows/ci.yml": `on:
  push: {}
steps:
  - name: hostile
    run: |
      printf '\033[31mred\033[0m\n'
      printf '\033]0;TITLE\007\033]52;c;ZXZpbA==\007\033[2J\033[1A'
      printf -- '-- step 1/1: hostile -- succeeded\n'
      exit 4
`,
	}
	w.commit(files)
	// lint refuses the file, naming it escaped.
	lint := w.cli("", "workflow", "lint")
	if lint.code != 1 || !strings.Contains(lint.stdout, `esc\x1b]0;TITLE\x07\x1b[31mred.yml:1:1: the file name `) ||
		!strings.Contains(lint.stdout, "U+001B (a control character)") ||
		strings.ContainsAny(lint.stdout, "\x1b\a") {
		t.Fatalf("lint: exit %d\n%q\n%s", lint.code, lint.stdout, lint.stderr)
	}
	runs := w.push(nil, 2)
	var esc, ci int64
	for _, r := range runs {
		if r.WorkflowPath == ".knotless/workflows/ci.yml" {
			ci = r.ID
		} else {
			esc = r.ID
		}
	}
	if ci == 0 || esc == 0 {
		t.Fatalf("runs %+v", runs)
	}
	if r := w.waitFinal(esc, 30*time.Second); r.State != "errored" || strings.ContainsAny(r.Workflow+r.WorkflowPath+r.Message, "\x1b\a") {
		t.Errorf("escape-named workflow's run: %s (%q, %q, %q); want errored, shown escaped", describe(r), r.Workflow, r.WorkflowPath, r.Message)
	}
	if r := w.waitFinal(ci, 60*time.Second); r.State != "failed" {
		t.Fatalf("ci run: %s", describe(r))
	}
	for _, args := range [][]string{
		{"run", "list", "--repo", w.repo},
		{"run", "show", itoa(esc)},
		{"run", "logs", itoa(esc)},
		{"run", "logs", itoa(ci)},
		{"run", "logs", "--repo", w.repo, "--latest"},
		{"workflow", "lint"},
	} {
		out, _ := w.cliTTY(args...)
		if !onlySGR(out) {
			t.Errorf("knotless %s: a control sequence other than colours reached the terminal:\n%q", strings.Join(args, " "), out)
		}
		if strings.Contains(strings.Join(args, " "), "logs "+itoa(ci)) {
			if !strings.Contains(out, `\x1b]0;TITLE\x07\x1b]52;c;ZXZpbA==\x07\x1b[2J\x1b[1A`) || !strings.Contains(out, "\x1b[31mred\x1b[0m") {
				t.Errorf("run logs on a terminal: the sequences are not shown escaped, or colours do not pass:\n%q", out)
			}
		}
	}
	raw := "\x1b]0;TITLE\a\x1b]52;c;ZXZpbA==\a\x1b[2J\x1b[1A"
	if out, _ := w.cliTTY("run", "logs", itoa(ci), "--raw"); !strings.Contains(out, raw) {
		t.Errorf("run logs --raw on a terminal is not byte for byte:\n%q", out)
	}
	if res := w.cli("", "run", "logs", itoa(ci)); !strings.Contains(res.stdout, raw) {
		t.Errorf("run logs into a pipe is not byte for byte:\n%q", res.stdout)
	}
}

// .knotless/workflows as a symbolic link to a directory of the repository:
// lint said "1 workflow OK", a push made no run and run trigger said no
// workflow had a manual trigger. A workflow file that is a symbolic link
// passed lint and failed on the server with "must be a mapping". Now lint,
// push and trigger all say it is a symbolic link.
func TestE2E_SymlinkedWorkflowsAreReportedAlikeByLintPushAndTrigger(t *testing.T) {
	t.Parallel()
	w := newWorld(t, 5*time.Second)
	wf := "on:\n  push: {}\n  manual: {}\nsteps:\n  - run: echo hi\n"
	w.commit(map[string]string{"ci/ci.yml": wf})
	if err := os.MkdirAll(filepath.Join(w.src, ".knotless"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../ci", filepath.Join(w.src, ".knotless", "workflows")); err != nil {
		t.Fatal(err)
	}
	const msg = ".knotless/workflows:1:1: is a symbolic link: workflows must be regular files"
	lint := w.cli("", "workflow", "lint")
	if lint.code != 1 || !strings.Contains(lint.stdout, msg) {
		t.Fatalf("lint of a symlinked workflows dir: exit %d\n%s\n%s", lint.code, lint.stdout, lint.stderr)
	}
	runs := w.push(nil, 1)
	if r := runs[0]; r.State != "errored" || !strings.HasPrefix(r.Message, msg) {
		t.Errorf("push: %s %q; want an errored run saying %q", describe(r), r.Message, msg)
	}
	tr := w.cli("", "run", "trigger", "--repo", w.repo)
	if !strings.Contains(tr.stdout, "errored") || strings.Contains(tr.stderr, "manual trigger") {
		t.Errorf("trigger: exit %d\n%s\n%s", tr.code, tr.stdout, tr.stderr)
	}
	if logs := w.cli("", "run", "logs", "--repo", w.repo, "--latest"); !strings.Contains(logs.stdout, msg) {
		t.Errorf("logs of the trigger's run:\n%s", logs.stdout)
	}

	// A workflow file that is a symbolic link, beside a real one.
	if err := os.Remove(filepath.Join(w.src, ".knotless", "workflows")); err != nil {
		t.Fatal(err)
	}
	w.commit(map[string]string{".knotless/workflows/real.yml": wf})
	if err := os.Symlink("../../ci/ci.yml", filepath.Join(w.src, ".knotless", "workflows", "linked.yml")); err != nil {
		t.Fatal(err)
	}
	const fileMsg = ".knotless/workflows/linked.yml:1:1: is a symbolic link: workflows must be regular files"
	lint = w.cli("", "workflow", "lint")
	if lint.code != 1 || !strings.Contains(lint.stdout, fileMsg) || strings.Contains(lint.stdout, "mapping") {
		t.Fatalf("lint of a symlinked workflow file: exit %d\n%s\n%s", lint.code, lint.stdout, lint.stderr)
	}
	runs = w.push(nil, 2)
	for _, r := range runs {
		if r.WorkflowPath == ".knotless/workflows/linked.yml" {
			if r.State != "errored" || !strings.HasPrefix(r.Message, fileMsg) || strings.Contains(r.Message, "mapping") {
				t.Errorf("push: %s %q; want errored saying %q", describe(r), r.Message, fileMsg)
			}
		} else if r.State != "queued" {
			t.Errorf("the real workflow's run: %s, want queued", describe(r))
		}
	}
}

// run trigger --ref 'main~5' or 'main^{commit}' was accepted and recorded
// as the ref refs/heads/main~5, which the run got as KNOTLESS_REF. --ref
// names an existing branch or tag; an older commit is given with --sha.
func TestE2E_TriggerRefRevisionExpressionIsRefusedAndShaRunsAnOlderCommit(t *testing.T) {
	t.Parallel()
	w := newWorld(t, 5*time.Second)
	w.startRunner(w.registerRunner("r1"))
	wf := "on:\n  manual: {}\nsteps:\n  - run: echo \"ref=$KNOTLESS_REF sha=$(git rev-parse HEAD)\"\n"
	w.commit(map[string]string{".knotless/workflows/m.yml": wf})
	first := w.git("rev-parse", "HEAD")
	w.commit(map[string]string{"README": "second\n"})
	w.git("push", "-q", w.url+"/"+w.repo+".git", "HEAD:refs/heads/main")
	for _, ref := range []string{"main~1", "main^{commit}", "main@{0}", "refs/heads/main~1"} {
		res := w.cli("", "run", "trigger", "--repo", w.repo, "--ref", ref)
		if res.code != 2 || !strings.Contains(res.stderr, "not a branch or tag name") {
			t.Errorf("--ref %s: exit %d\n%s\n%s", ref, res.code, res.stdout, res.stderr)
		}
	}
	if p := w.latestPipeline(); p != 0 {
		t.Fatalf("a refused trigger made pipeline %d", p)
	}
	res := w.cli("", "run", "trigger", "--repo", w.repo, "--ref", "main", "--sha", first, "-f")
	if res.code != 0 || !strings.Contains(res.stdout, "ref=refs/heads/main sha="+first) {
		t.Fatalf("trigger --sha %s: exit %d\n%s\n%s", first, res.code, res.stdout, res.stderr)
	}
}
