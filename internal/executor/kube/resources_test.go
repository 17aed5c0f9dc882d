package kube_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"knotless.dev/knotless/internal/executor/agentenv"

	"k8s.io/client-go/rest"

	"knotless.dev/knotless/internal/executor"
	"knotless.dev/knotless/internal/executor/kube"
)

// TestPrepare_OverCapResourcesNamedOnlyTheFirst pins the new-user trial's
// finding: a workflow asking for more cpu, memory and disk than the
// runner allows was told only about cpu. Every value over its cap is
// named with the cap's flag, before anything reaches the API server.
func TestPrepare_OverCapResourcesNamedOnlyTheFirst(t *testing.T) {
	e, err := kube.New(kube.Config{Config: agentenv.Config{Agent: "/nonexistent", Job: executor.Job{Image: "img", CPUs: "1", Memory: 1 << 30}}, Rest: &rest.Config{Host: "http://127.0.0.1:1"}, Namespace: "ci", Disk: 2 << 30})
	if err != nil {
		t.Fatal(err)
	}
	_, err = e.Prepare(context.Background(), executor.Spec{ID: "run-1", Workspace: t.TempDir(),
		CPUs: "4", MemoryBytes: 8 << 30, DiskBytes: 100 << 30})
	var f *executor.Fault
	if !errors.As(err, &f) {
		t.Fatalf("Prepare: %v, want an executor.Fault", err)
	}
	for _, want := range []string{"cpus 4 (--cpus 1)", "memory 8Gi (--memory 1Gi)", "disk 100Gi (--disk 2Gi)"} {
		if !strings.Contains(f.Message, want) {
			t.Errorf("message %q lacks %q", f.Message, want)
		}
	}
}
