package e2e

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/testwait"
)

// outputsWorkflow builds dist/ (a nested directory with a ~5 MB random
// binary, a file made from the checkout and a relative symbolic link) and
// coverage.out (binary) over two steps, keeps a copy of each file in
// $GATE/expect/ for the test to compare with, and ends with exitCode.
func outputsWorkflow(exitCode int) map[string]string {
	return map[string]string{
		"src/version.txt": "v1.2.3\n",
		".knotless/workflows/build.yml": `on:
  push:
    branches: [main]
outputs: [dist/, coverage.out, missing/report.txt]
steps:
  - name: build
    run: |
      mkdir -p dist/bin dist/doc/deep
      head -c 5000000 /dev/urandom > dist/bin/app.bin
      chmod 755 dist/bin/app.bin
      cp src/version.txt dist/doc/deep/VERSION
      ln -s bin/app.bin dist/app
      : > dist/empty
  - name: test
    run: |
      printf 'mode: set\n\000\001\002\377 binary\n' > coverage.out
      head -c 70000 /dev/urandom >> coverage.out
      rm -rf "$GATE/expect" && mkdir -p "$GATE/expect"
      cp -a dist coverage.out "$GATE/expect/"
      exit ` + itoa(int64(exitCode)) + `
`,
	}
}

// treeDigest describes every entry under root: type, permission bits,
// SHA-256 of a file's bytes, a link's target.
func treeDigest(t *testing.T, root string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if rel == "." {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			out[rel] = "link -> " + target
		case fi.IsDir():
			out[rel] = "dir"
		default:
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			sum := sha256.Sum256(b)
			out[rel] = fi.Mode().Perm().String() + " " + hex.EncodeToString(sum[:]) + " " + itoa(int64(len(b)))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func assertSameTree(t *testing.T, got, want map[string]string) {
	t.Helper()
	for p, w := range want {
		if g, ok := got[p]; !ok {
			t.Errorf("%s: missing from the downloaded outputs", p)
		} else if g != w {
			t.Errorf("%s: downloaded %s, the step wrote %s", p, g, w)
		}
	}
	for p := range got {
		if _, ok := want[p]; !ok {
			t.Errorf("%s: in the downloaded outputs, not written by the step", p)
		}
	}
}

// A multi-step run with a checkout writes a directory (nested, a 5 MB
// binary, a symbolic link) and a binary file: `knotless run show` lists
// them with the archive's SHA-256, `knotless run outputs` unpacks them
// byte for byte, refuses to unpack over them a second time, and a listed
// path that does not exist is a line in the setup log, not a failure.
func TestE2E_OutputsOfARunDownloadByteForByteWithTheCLI(t *testing.T) {
	t.Parallel()
	w := newWorld(t, 10*time.Second)
	w.startRunner(w.registerRunner("r1"))
	run := w.pushOne(outputsWorkflow(0))
	final := w.waitFinal(run.ID, 90*time.Second)
	setup := w.stepLog(run.ID, api.SetupStep)
	if final.State != api.StateSucceeded {
		t.Fatalf("%s, want succeeded; setup log:\n%s", describe(final), setup)
	}
	for _, want := range []string{
		"outputs: missing/report.txt does not exist: not collected",
		"outputs: collected dist/: 4.8 MiB in 8 entries",
		"outputs: collected coverage.out:",
		"outputs: stored by the server (",
	} {
		if !strings.Contains(setup, want) {
			t.Errorf("setup log lacks %q:\n%s", want, setup)
		}
	}
	if final.Outputs == nil || final.Outputs.Files != 9 || final.Outputs.Bytes < 5_070_000 {
		t.Fatalf("run's outputs %+v, want 9 entries (dist/ and 7 below it, coverage.out) of over 5 MB", final.Outputs)
	}
	if !strings.Contains(setup, "sha256 "+final.Outputs.SHA256) {
		t.Errorf("setup log does not show the archive's sha256 %s:\n%s", final.Outputs.SHA256, setup)
	}

	show := w.cliOK("", "run", "show", itoa(run.ID))
	for _, want := range []string{
		"Outputs: 9 entries", "sha256 " + final.Outputs.SHA256,
		"dist/bin/app.bin", "4.8 MiB", "dist/app -> bin/app.bin", "dist/doc/deep/VERSION", "coverage.out",
		"Download: knotless run outputs " + itoa(run.ID),
	} {
		if !strings.Contains(show, want) {
			t.Errorf("run show lacks %q:\n%s", want, show)
		}
	}

	dst := filepath.Join(w.root, "got")
	out := w.cliOK("", "run", "outputs", itoa(run.ID), "-o", dst)
	if !strings.Contains(out, "sha256 "+final.Outputs.SHA256+" verified") {
		t.Errorf("run outputs does not say it verified the sha256:\n%s", out)
	}
	assertSameTree(t, treeDigest(t, dst), treeDigest(t, filepath.Join(w.gate, "expect")))

	again := w.cli("", "run", "outputs", itoa(run.ID), "-o", dst)
	if again.code != 1 || !strings.Contains(again.stderr, "not empty") {
		t.Errorf("a second download into the same directory: exit %d, stderr %q; want 1 and a refusal", again.code, again.stderr)
	}
	// The default directory is ./run-ID-outputs of the working directory.
	w.cliOK("", "run", "outputs", itoa(run.ID))
	assertSameTree(t, treeDigest(t, filepath.Join(w.src, "run-"+itoa(run.ID)+"-outputs")), treeDigest(t, filepath.Join(w.gate, "expect")))
}

// A run whose last step fails still stores its outputs.
func TestE2E_FailedRunStillStoresItsOutputs(t *testing.T) {
	t.Parallel()
	w := newWorld(t, 10*time.Second)
	w.startRunner(w.registerRunner("r1"))
	run := w.pushOne(outputsWorkflow(3))
	final := w.waitFinal(run.ID, 90*time.Second)
	if final.State != api.StateFailed || final.Reason != api.ReasonExitCode || final.Outputs == nil {
		t.Fatalf("%s with outputs %+v; want failed/exit-code with outputs; setup log:\n%s", describe(final), final.Outputs, w.stepLog(run.ID, api.SetupStep))
	}
	dst := filepath.Join(w.root, "got")
	w.cliOK("", "run", "outputs", itoa(run.ID), "-o", dst)
	assertSameTree(t, treeDigest(t, dst), treeDigest(t, filepath.Join(w.gate, "expect")))
}

// Outputs past the server's --max-outputs-size are refused before the
// server keeps any of them: the run's setup log says so, naming the flag,
// the run keeps the result of its steps, and the CLI finds nothing to
// download.
func TestE2E_OutputsOverTheServerLimitAreRefusedNamingTheFlag(t *testing.T) {
	t.Parallel()
	w := newWorld(t, 10*time.Second, "--max-outputs-size", "1MiB")
	w.startRunner(w.registerRunner("r1"))
	run := w.pushOne(outputsWorkflow(0))
	final := w.waitFinal(run.ID, 90*time.Second)
	setup := w.stepLog(run.ID, api.SetupStep)
	if final.State != api.StateSucceeded || final.Outputs != nil {
		t.Fatalf("%s with outputs %+v; want succeeded without outputs; setup log:\n%s", describe(final), final.Outputs, setup)
	}
	if !strings.Contains(setup, "more than this server's limit of 1 MiB per run (knotless-server --max-outputs-size)") {
		t.Errorf("setup log does not say why the outputs were refused:\n%s", setup)
	}
	res := w.cli("", "run", "outputs", itoa(run.ID), "-o", filepath.Join(w.root, "got"))
	if res.code != 5 || !strings.Contains(res.stderr, "stored no outputs") {
		t.Errorf("run outputs of a run without outputs: exit %d, stderr %q; want 5 and 'stored no outputs'", res.code, res.stderr)
	}
	entries, _ := os.ReadDir(filepath.Join(w.data, "outputs", itoa(run.ID)))
	var names bytes.Buffer
	for _, e := range entries {
		names.WriteString(e.Name() + " ")
	}
	if len(entries) != 0 {
		t.Errorf("the server kept files of refused outputs: %s", names.String())
	}
}

// A runner SIGKILLed while the first step runs: the process that takes the
// run over collects the outputs of every step, the earlier process's
// included, and they arrive byte for byte.
func TestE2E_RunnerKilledMidRunTheSuccessorCollectsTheOutputs(t *testing.T) {
	t.Parallel()
	w := newWorld(t, 30*time.Second)
	rid := w.registerRunner("r1")
	first := w.startRunner(rid)
	run := w.pushOne(map[string]string{".knotless/workflows/ci.yml": `on:
  push: {}
outputs: [dist]
steps:
  - name: first
    run: |
      mkdir -p dist && head -c 2000000 /dev/urandom > dist/first.bin
      touch "$GATE/half-o"
      ` + gateWait("go-o") + `
  - name: second
    run: |
      head -c 3000 /dev/urandom > dist/second.bin
      rm -rf "$GATE/expect" && mkdir -p "$GATE/expect" && cp -a dist "$GATE/expect/"
`})
	w.waitGate(run.ID, "half-o", 60*time.Second)
	first.signal(t, syscall.SIGKILL)
	first.wait(t, 10*time.Second)
	second := w.startRunner(rid)
	testwait.Until(t, 30*time.Second, "the new runner to take the run over", func() (bool, string) {
		return strings.Contains(second.output(), "taking over a run"), ""
	})
	w.openGate("go-o")
	final := w.waitFinal(run.ID, 60*time.Second)
	setup := w.stepLog(run.ID, api.SetupStep)
	if final.State != api.StateSucceeded || final.Outputs == nil || final.Outputs.Files != 3 {
		t.Fatalf("%s with outputs %+v; want succeeded with 3 entries; setup log:\n%s", describe(final), final.Outputs, setup)
	}
	if !strings.Contains(setup, "took the run over") || !strings.Contains(setup, "outputs: collected dist/: 1.9 MiB in 3 entries") {
		t.Errorf("setup log does not show the successor collecting the outputs:\n%s", setup)
	}
	dst := filepath.Join(w.root, "got")
	w.cliOK("", "run", "outputs", itoa(run.ID), "-o", dst)
	assertSameTree(t, treeDigest(t, dst), treeDigest(t, filepath.Join(w.gate, "expect")))
	w.waitNoWorkspace(rid, run.ID)
}
