package e2e

import (
	"bytes"
	"encoding/base64"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"knotless.dev/knotless/internal/api"
)

// A secret set from stdin reaches the step that lists it, and while that step
// runs the value is in no process's command line and in the environment of
// neither the server nor the runner; the log shows *** for the plain value,
// its base64 form and a value split across two writes; no file of the server
// or the runner holds the plaintext.
func TestE2E_SecretNeverInAnyCommandLine(t *testing.T) {
	t.Parallel()
	w := newWorld(t, 5*time.Second)
	secret := "e2e-secret-" + randomHex(12)
	b64 := base64.StdEncoding.EncodeToString([]byte(secret))
	w.cliOK(secret+"\n", "secret", "set", "DEPLOY_KEY", "--repo", w.repo)
	if out := w.cliOK("", "secret", "list", "--repo", w.repo); !strings.Contains(out, "DEPLOY_KEY") || strings.Contains(out, secret) {
		t.Fatalf("secret list: want the name, never the value:\n%s", out)
	}
	rid := w.registerRunner("r1")
	runner := w.startRunner(rid)

	run := w.pushOne(map[string]string{".knotless/workflows/ci.yml": `on:
  push: {}
secrets: [DEPLOY_KEY]
steps:
  - name: use
    secrets: [DEPLOY_KEY]
    run: |
      touch "$GATE/started"
      while [ ! -e "$GATE/release" ]; do sleep 0.05; done
      echo "plain: $DEPLOY_KEY"
      printf 'b64: '; printf %s "$DEPLOY_KEY" | base64
      printf 'split: %s' "${DEPLOY_KEY%????}"; sleep 0.2; printf '%s\n' "${DEPLOY_KEY#"${DEPLOY_KEY%????}"}"
  - name: not-listed
    run: |
      echo "unlisted: ${DEPLOY_KEY-unset}"
`})
	w.waitGate(run.ID, "started", 60*time.Second)

	// The step holds the secret now. Every command line on the machine, and
	// the environments of the long-lived processes, must not.
	cmdlines := procFiles("cmdline")
	if len(cmdlines) < 5 {
		t.Fatalf("read only %d command lines from /proc", len(cmdlines))
	}
	for pid, cmdline := range cmdlines {
		for _, leak := range []string{secret, b64} {
			if bytes.Contains(cmdline, []byte(leak)) {
				t.Errorf("/proc/%d/cmdline holds the secret (%q): %q", pid, leak, cmdline)
			}
		}
	}
	environs := procFiles("environ")
	for _, p := range []*proc{w.server, runner} {
		env, ok := environs[p.pid()]
		if !ok {
			t.Fatalf("cannot read /proc/%d/environ of %s", p.pid(), p.name)
		}
		if bytes.Contains(env, []byte(secret)) || bytes.Contains(env, []byte(b64)) {
			t.Errorf("/proc/%d/environ of %s holds the secret", p.pid(), p.name)
		}
	}
	// The step agent got the secret over its socket, for the step's
	// execve only: not in its own environment, nor in any file it keeps
	// (scripts, output, state) while the step runs.
	agents := 0
	for pid, cmdline := range cmdlines {
		if args := bytes.Split(cmdline, []byte{0}); len(args) > 1 && filepath.Base(string(args[0])) == "knotless-agent" &&
			bytes.Contains(cmdline, []byte(rid.work)) {
			agents++
			if env := environs[pid]; bytes.Contains(env, []byte(secret)) || bytes.Contains(env, []byte(b64)) {
				t.Errorf("/proc/%d/environ of the step agent holds the secret", pid)
			}
		}
	}
	if agents == 0 {
		t.Errorf("no knotless-agent of this runner runs while the step does")
	}
	grepTree(t, rid.work, secret, b64)
	// Sanity: the step did receive it (its environment is the one place
	// the value may be).
	holders := 0
	for _, env := range environs {
		if bytes.Contains(env, []byte("DEPLOY_KEY="+secret)) {
			holders++
		}
	}
	if holders == 0 {
		t.Errorf("no process has DEPLOY_KEY in its environment while the step runs: the step did not get the secret")
	}

	w.openGate("release")
	final := w.waitFinal(run.ID, 60*time.Second)
	if final.State != api.StateSucceeded {
		t.Fatalf("%s, want succeeded", describe(final))
	}
	res := w.cli("", "run", "logs", itoa(run.ID))
	if res.code != 0 {
		t.Fatalf("run logs: exit %d\n%s%s", res.code, res.stdout, res.stderr)
	}
	for _, want := range []string{"plain: ***\n", "b64: ***\n", "split: ***\n", "unlisted: unset\n"} {
		if !strings.Contains(res.stdout, want) {
			t.Errorf("run logs lacks %q:\n%s", want, res.stdout)
		}
	}
	for _, leak := range []string{secret, b64, secret[:len(secret)-4]} {
		if strings.Contains(res.stdout+res.stderr, leak) {
			t.Errorf("run logs holds %q:\n%s", leak, res.stdout)
		}
	}

	// On disk: the server's data directory (database, logs, keys) and the
	// runner's work directory (spools, mirrors) never hold the plaintext,
	// nor do the processes' own logs.
	runner.signal(t, syscall.SIGTERM)
	if code := runner.wait(t, 60*time.Second); code != 0 {
		t.Errorf("knotless-run exited %d after SIGTERM", code)
	}
	for _, dir := range []string{w.data, rid.work} {
		grepTree(t, dir, secret, b64)
	}
	for _, p := range []*proc{w.server, runner} {
		if out := p.output(); strings.Contains(out, secret) || strings.Contains(out, b64) {
			t.Errorf("the log of %s holds the secret:\n%s", p.name, out)
		}
	}
}

// grepTree fails the test if any regular file under dir holds one of leaks.
func grepTree(t *testing.T, dir string, leaks ...string) {
	t.Helper()
	files := 0
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.Type().IsRegular() {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		files++
		for _, leak := range leaks {
			if bytes.Contains(b, []byte(leak)) {
				t.Errorf("%s holds the secret in plaintext (%q)", path, leak)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("walk %s: %v", dir, err)
	}
	if files == 0 {
		t.Fatalf("no files under %s: nothing was checked", dir)
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
