package kube_test

import (
	"bytes"
	"context"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"knotless.dev/knotless/internal/executor"
	"knotless.dev/knotless/internal/executor/kube"
	"knotless.dev/knotless/test/kubetest"
)

// benchSession prepares one session of a job pod with 1 cpu, 512 MiB of
// memory and 1 GiB of disk over workspace (a fresh empty one when ""),
// and returns it with its setup log.
func benchSession(b *testing.B, f *fixture, workspace string) (executor.Session, string) {
	b.Helper()
	cfg := f.config()
	cfg.CPUs, cfg.Memory, cfg.Disk = "1", 512<<20, 1<<30
	e := f.executor(b, cfg)
	if workspace == "" {
		workspace = b.TempDir()
	}
	var log bytes.Buffer
	s, err := e.Prepare(context.Background(), executor.Spec{ID: fmt.Sprintf("bench-%d", time.Now().UnixNano()), Workspace: workspace, Timeout: time.Hour, Log: &log})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Cleanup(context.Background()) })
	return s, log.String()
}

func execOK(b *testing.B, s executor.Session, id, script string, out io.Writer) {
	b.Helper()
	res, err := s.Exec(context.Background(), executor.Step{ID: id, Script: script}, out)
	if err != nil || res.ExitCode != 0 {
		b.Fatalf("step %s: %+v, %v", id, res, err)
	}
}

// BenchmarkKube_Step is the cost of one more step of `true` in a running
// job pod (all steps over the run's one exec stream), against one bare
// exec round trip of `true` into the same pod (kubetest.Baseline's
// WebSocket exec, a new exec per call). ns/op is per step.
//
//	KNOTLESS_TEST_CLUSTER_REQUIRED=1 go test -count=1 -run '^$' -bench 'Kube_' -benchtime 50x ./internal/executor/kube
func BenchmarkKube_Step(b *testing.B) {
	f := newFixture(b)
	s, _ := benchSession(b, f, "")
	execOK(b, s, "warm", "true", io.Discard)
	b.Run("agent-stream", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			execOK(b, s, "s"+strconv.Itoa(i)+"-"+strconv.FormatInt(time.Now().UnixNano(), 36), "true", io.Discard)
		}
	})
	b.Run("bare-exec", func(b *testing.B) {
		pod := podOf(b, s)
		for i := 0; i < b.N; i++ {
			if _, _, code, err := kubetest.Exec(context.Background(), f.rest, f.ns, pod, kube.Container, []string{"true"}, nil); err != nil || code != 0 {
				b.Fatalf("exec true: exit %d, %v", code, err)
			}
		}
	})
}

var deliveredIn = regexp.MustCompile(`delivered \(([0-9.]+) MB\) and connected in ([0-9.]+)(ms|s)`)

// BenchmarkKube_Lifecycle is one job pod's life without a step:
// Prepare (create → Running, the agent delivered over the first exec and
// connected: reported separately as delivery-ms) and Cleanup (run end →
// pod gone: the agent asked to exit, the pod deleted with grace 0).
func BenchmarkKube_Lifecycle(b *testing.B) {
	f := newFixture(b)
	cfg := f.config()
	cfg.CPUs = "1"
	e := f.executor(b, cfg)
	var prep, deliver, gone time.Duration
	for i := 0; i < b.N; i++ {
		var log bytes.Buffer
		t0 := time.Now()
		s, err := e.Prepare(context.Background(), executor.Spec{ID: "life-" + strconv.Itoa(i), Workspace: b.TempDir(), Timeout: time.Hour, Log: &log})
		if err != nil {
			b.Fatal(err)
		}
		prep += time.Since(t0)
		m := deliveredIn.FindStringSubmatch(log.String())
		if m == nil {
			b.Fatalf("setup log names no delivery time:\n%s", log.String())
		}
		v, _ := strconv.ParseFloat(m[2], 64)
		if m[3] == "s" {
			v *= 1000
		}
		deliver += time.Duration(v * float64(time.Millisecond))
		t1 := time.Now()
		if err := s.Cleanup(context.Background()); err != nil {
			b.Fatal(err)
		}
		gone += time.Since(t1)
	}
	n := float64(b.N)
	b.ReportMetric(float64(prep.Milliseconds())/n, "prepare-ms")
	b.ReportMetric(float64(deliver.Milliseconds())/n, "delivery-ms")
	b.ReportMetric(float64(gone.Milliseconds())/n, "end-to-gone-ms")
}

// BenchmarkKube_UserNamespace is what a user namespace costs a run's
// start (issue 34): per iteration, one pod with --user-namespace auto
// (hostUsers false: the runtime maps the pod's uids, runc id-maps its
// mounts) and one with off, alternating in the same run, each from
// Prepare to the end of a first step `true`. Reported as
// userns-first-step-ms and host-users-first-step-ms (means) and their
// difference, userns-extra-ms. Under a RuntimeClass without user
// namespaces (gVisor) it skips.
//
//	KNOTLESS_TEST_CLUSTER_REQUIRED=1 go test -count=1 -run '^$' -bench 'Kube_UserNamespace' -benchtime 10x ./internal/executor/kube
func BenchmarkKube_UserNamespace(b *testing.B) {
	f := newFixture(b)
	if f.runtimeClass != "" {
		b.Skipf("RuntimeClass %s makes no user namespaces", f.runtimeClass)
	}
	var took [2]time.Duration
	var exs [2]*kube.Executor
	for i, mode := range []string{kube.UserNamespaceAuto, kube.UserNamespaceOff} {
		cfg := f.config()
		cfg.CPUs, cfg.UserNamespace = "1", mode
		exs[i] = f.executor(b, cfg)
	}
	for i := 0; i < b.N; i++ {
		for m, e := range exs {
			t0 := time.Now()
			s, err := e.Prepare(context.Background(), executor.Spec{ID: fmt.Sprintf("userns-%d-%d", m, i), Workspace: b.TempDir(), Timeout: time.Hour})
			if err != nil {
				b.Fatal(err)
			}
			execOK(b, s, "1", "true", io.Discard)
			took[m] += time.Since(t0)
			if err := s.Cleanup(context.Background()); err != nil {
				b.Fatal(err)
			}
		}
	}
	n := float64(b.N)
	b.ReportMetric(float64(took[0].Milliseconds())/n, "userns-first-step-ms")
	b.ReportMetric(float64(took[1].Milliseconds())/n, "host-users-first-step-ms")
	b.ReportMetric(float64((took[0]-took[1]).Milliseconds())/n, "userns-extra-ms")
}

// BenchmarkKube_CopyIn copies a checkout into a job pod with 1 cpu: MB/s
// of the files' bytes (the tar stream over the exec, verified by length
// and SHA-256 at both ends and by each file's size). Two trees: "random", 100 files of 1 MB of random
// bytes (incompressible), "text", 100 files of 1 MB of Go source (the
// compiler's, repeated), and "source", Go's own src/cmd as it is (~4,400
// files, ~51 MB of Go source and test data: what a checkout mostly holds).
func BenchmarkKube_CopyIn(b *testing.B) {
	f := newFixture(b)
	random := b.TempDir()
	data := make([]byte, 1e6)
	rng := rand.NewChaCha8([32]byte{7})
	for i := 0; i < 100; i++ {
		_, _ = rng.Read(data)
		if err := os.WriteFile(filepath.Join(random, fmt.Sprintf("f%03d", i)), data, 0o644); err != nil {
			b.Fatal(err)
		}
	}
	source := filepath.Join(goRoot(b), "src", "cmd")
	text := b.TempDir()
	corpus := goSource(b, filepath.Join(source, "compile"), 100e6)
	for i := 0; i < 100; i++ {
		if err := os.WriteFile(filepath.Join(text, fmt.Sprintf("f%03d.go", i)), corpus[i*1e6:(i+1)*1e6], 0o644); err != nil {
			b.Fatal(err)
		}
	}
	s, _ := benchSession(b, f, "")
	for _, tree := range []struct{ name, dir string }{{"random", random}, {"text", text}, {"source", source}} {
		b.Run(tree.name, func(b *testing.B) {
			size := treeBytes(b, tree.dir)
			b.SetBytes(size)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if err := s.CopyIn(context.Background(), tree.dir, "copy-"+strconv.Itoa(i)); err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				execOK(b, s, "rm-"+strconv.Itoa(i)+"-"+strconv.FormatInt(time.Now().UnixNano(), 36), "rm -rf copy-"+strconv.Itoa(i), io.Discard)
				b.StartTimer()
			}
		})
	}
}

// goSource returns n bytes of the .go files below dir, concatenated and
// repeated as often as needed.
// goRoot returns the Go installation's root as `go env GOROOT` prints it
// (not runtime.GOROOT, which a -trimpath test binary reports empty: the
// tests build with -trimpath to share make build's compiled packages).
// It fails b when the go command cannot say.
func goRoot(b *testing.B) string {
	b.Helper()
	out, err := exec.Command("go", "env", "GOROOT").Output()
	root := strings.TrimSpace(string(out))
	if err != nil || root == "" {
		b.Fatalf("go env GOROOT: %q, %v", root, err)
	}
	return root
}

func goSource(b *testing.B, dir string, n int) []byte {
	b.Helper()
	var all []byte
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() || filepath.Ext(p) != ".go" {
			return err
		}
		data, err := os.ReadFile(p)
		all = append(all, data...)
		return err
	})
	if err != nil || len(all) == 0 {
		b.Fatalf("no Go source below %s: %v", dir, err)
	}
	out := make([]byte, 0, n)
	for len(out) < n {
		out = append(out, all[:min(len(all), n-len(out))]...)
	}
	return out
}

// treeBytes is the size of the regular files below dir, in bytes.
func treeBytes(b *testing.B, dir string) int64 {
	b.Helper()
	var n int64
	err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		info, err := d.Info()
		if err == nil {
			n += info.Size()
		}
		return err
	})
	if err != nil {
		b.Fatal(err)
	}
	return n
}

// checkWriter counts and checksums (CRC-32C) what is written to it.
type checkWriter struct {
	n   int64
	sum uint32
}

func (c *checkWriter) Write(p []byte) (int, error) {
	c.n += int64(len(p))
	c.sum = crc32.Update(c.sum, crc32.MakeTable(crc32.Castagnoli), p)
	return len(p), nil
}

// BenchmarkKube_Log is a step printing 100 MB (10^8 bytes) in a job pod
// with 1 cpu, every byte arriving at the runner (counted, and its CRC-32C
// compared with what the step printed): MB/s of the step's output. Three
// outputs: "zeros" (head -c of /dev/zero), "text" (a 10 MB file of Go
// source printed 10 times) and "random" (10 MB of random bytes, 10 times:
// what does not compress). The runner asks for compressed output
// (OutputZstd frames) as the kube executor does; the agent sends frames
// that did not shrink as they are.
func BenchmarkKube_Log(b *testing.B) {
	f := newFixture(b)
	work := b.TempDir()
	text := goSource(b, filepath.Join(goRoot(b), "src", "cmd", "compile"), 10e6)
	random := make([]byte, 10e6)
	_, _ = rand.NewChaCha8([32]byte{9}).Read(random)
	for name, data := range map[string][]byte{"text": text, "random": random} {
		if err := os.WriteFile(filepath.Join(work, name), data, 0o644); err != nil {
			b.Fatal(err)
		}
	}
	s, _ := benchSession(b, f, "")
	if err := s.CopyIn(context.Background(), work, "out"); err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		name, script string
		want         []byte // the output, or nil for 100 MB of zeros
	}{
		{"zeros", "head -c 100000000 /dev/zero", nil},
		{"text", "for i in 1 2 3 4 5 6 7 8 9 10; do cat out/text; done", bytes.Repeat(text, 10)},
		{"random", "for i in 1 2 3 4 5 6 7 8 9 10; do cat out/random; done", bytes.Repeat(random, 10)},
	} {
		if c.want == nil {
			c.want = make([]byte, 100e6)
		}
		want := crc32.Checksum(c.want, crc32.MakeTable(crc32.Castagnoli))
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(100e6)
			for i := 0; i < b.N; i++ {
				var w checkWriter
				execOK(b, s, "log-"+c.name+strconv.Itoa(i)+"-"+strconv.FormatInt(time.Now().UnixNano(), 36), c.script, &w)
				if w.n != 100e6 || w.sum != want {
					b.Fatalf("%d bytes arrived (CRC-32C %08x), want 100000000 (%08x)", w.n, w.sum, want)
				}
			}
		})
	}
}
