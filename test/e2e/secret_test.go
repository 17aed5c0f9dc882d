package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unicode/utf8"

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

// randomNonUTF8 returns n random bytes that are not valid UTF-8, hold no
// NUL and do not end in a newline (which set would remove).
func randomNonUTF8(t *testing.T, n int) []byte {
	t.Helper()
	for {
		b := make([]byte, n)
		if _, err := rand.Read(b); err != nil {
			t.Fatal(err)
		}
		b[0] = 0xff // never valid in UTF-8
		for i := range b {
			if b[i] == 0 {
				b[i] = 0x80
			}
		}
		if b[n-1] == '\n' {
			b[n-1] = 0xfe
		}
		if !utf8.Valid(b) {
			return b
		}
	}
}

// A 19-byte value that is not valid UTF-8 was reported by `secret set` as
// 19 bytes, while the step received 27 (U+FFFD for each bad byte, JSON
// strings on the wire): the step gets exactly the bytes that were set, as
// `knotless-run exec --secret` gives them, and the raw value is masked.
func TestE2E_SecretNonUTF8BytesReachStepExactly(t *testing.T) {
	t.Parallel()
	w := newWorld(t, 5*time.Second)
	value := randomNonUTF8(t, 19)
	out := w.cliOK(string(value), "secret", "set", "RAW", "--repo", w.repo)
	if !strings.Contains(out, "(19 bytes)") {
		t.Fatalf("secret set: want 19 bytes reported:\n%s", out)
	}
	w.startRunner(w.registerRunner("r1"))
	run := w.pushOne(map[string]string{".knotless/workflows/ci.yml": `on:
  push: {}
secrets: [RAW]
steps:
  - name: bytes
    secrets: [RAW]
    run: |
      printf 'len=%s\n' "$(printf %s "$RAW" | wc -c | tr -d ' ')"
      printf 'hex=%s\n' "$(printf %s "$RAW" | od -An -tx1 | tr -d ' \n')"
      printf 'raw=%s\n' "$RAW"
`})
	final := w.waitFinal(run.ID, 60*time.Second)
	if final.State != api.StateSucceeded {
		t.Fatalf("%s, want succeeded\n%s", describe(final), w.stepLog(run.ID, 0))
	}
	want := fmt.Sprintf("len=19\nhex=%x\nraw=***\n", value)
	if got := w.stepLog(run.ID, 1); got != want {
		t.Errorf("step log through the server:\n%q\nwant\n%q", got, want)
	}

	// knotless-run exec --secret gives the step the same bytes.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, runnerBin(), "exec", ".knotless/workflows/ci.yml", "--secret", "RAW")
	cmd.Dir = w.src
	cmd.Env = append(baseEnv(w.home), "RAW="+string(value))
	local, err := cmd.Output()
	if err != nil {
		t.Fatalf("knotless-run exec: %v\n%s", err, local)
	}
	if !strings.Contains(string(local), want) {
		t.Errorf("knotless-run exec output lacks %q:\n%s", want, local)
	}
}

// A value with a NUL byte was accepted, and then every run using it ended
// errored (executor): set refuses it, saying why, and nothing is stored.
func TestE2E_SecretWithNULIsRefusedAtSet(t *testing.T) {
	t.Parallel()
	w := newWorld(t, 5*time.Second)
	res := w.cli("token\x00-with-nul", "secret", "set", "NULLY", "--repo", w.repo)
	if res.code == 0 {
		t.Fatalf("secret set with a NUL byte: exit 0, want a refusal\n%s%s", res.stdout, res.stderr)
	}
	for _, want := range []string{"secret NULLY: the value holds a NUL byte (at byte 5 of 15)", "an environment variable cannot hold NUL", "not set"} {
		if !strings.Contains(res.stderr, want) {
			t.Errorf("secret set stderr lacks %q:\n%s", want, res.stderr)
		}
	}
	if out := w.cliOK("", "secret", "list", "--repo", w.repo); strings.Contains(out, "NULLY") {
		t.Errorf("a refused secret is listed:\n%s", out)
	}
}
