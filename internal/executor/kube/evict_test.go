package kube_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/executor"
	"knotless.dev/knotless/internal/syncbuf"
)

// TestKube_DiskOverItsLimitIsEvictedWithTheKubeletsMessage: a step that
// fills its pod's disk past the emptyDir's sizeLimit gets the pod evicted
// by the kubelet; the run once ended pod-lost (or cancelled on the exec
// path) although the kubelet had said "Usage of EmptyDir volume ...
// exceeds the limit". The step now ends evicted with the kubelet's words.
func TestKube_DiskOverItsLimitIsEvictedWithTheKubeletsMessage(t *testing.T) {
	f := newFixture(t)
	cfg := f.config()
	cfg.Disk = 32 << 20
	s := f.prepare(t, f.executor(t, cfg), f.spec(t, runID("diskfill")))
	var out syncbuf.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	// 64 MiB into the 32 MiB workspace, then wait for the kubelet's
	// eviction manager (it looks every 10 s).
	ch := startStep(ctx, s, executor.Step{ID: "1", Script: "dd if=/dev/zero of=big bs=1M count=64 2>/dev/null; echo filled; sleep 300"}, &out)
	res, err := await(t, ch, 3*time.Minute)
	t.Logf("result %+v, err %v, output %q", res, err, out.Bytes())
	if err != nil || res.Reason != api.ReasonEvicted || res.ExitCode != -1 {
		t.Fatalf("result %+v, err %v; want evicted, no exit code", res, err)
	}
	if !strings.Contains(res.Note, "exceeds") && !strings.Contains(res.Note, "ephemeral") {
		t.Errorf("note %q does not carry the kubelet's message", res.Note)
	}
}
