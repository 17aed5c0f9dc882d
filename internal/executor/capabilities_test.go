package executor_test

import (
	"slices"
	"testing"

	"k8s.io/client-go/rest"

	"knotless.dev/knotless/internal/executor"
	"knotless.dev/knotless/internal/executor/agentenv"
	"knotless.dev/knotless/internal/executor/docker"
	"knotless.dev/knotless/internal/executor/kube"
	"knotless.dev/knotless/internal/executor/shell"
)

// TestCapabilities_EachExecutorHasTheOnesItsDocsName pins which optional
// capabilities each executor has (executor.Capabilities lists them all),
// so that one lost in a refactoring is noticed.
func TestCapabilities_EachExecutorHasTheOnesItsDocsName(t *testing.T) {
	d, err := docker.New(docker.Config{Config: agentenv.Config{Agent: "/bin/true"}})
	if err != nil {
		t.Fatal(err)
	}
	k, err := kube.New(kube.Config{Config: agentenv.Config{Agent: "/bin/true"}, Rest: &rest.Config{Host: "http://127.0.0.1:1"}, Namespace: "ci"})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		ex   executor.Executor
		want []string
	}{
		{shell.New(shell.Config{Dir: t.TempDir()}), []string(nil)},
		{d, []string{"doctor"}},
		{k, []string{"find", "doctor", "facts", "count", "close"}},
	} {
		if got := executor.Capabilities(tc.ex); !slices.Equal(got, tc.want) {
			t.Errorf("%s: %v, want %v", tc.ex.Name(), got, tc.want)
		}
	}
	if got := executor.Capabilities(&agentenv.Session{}); !slices.Equal(got, []string{"cache", "detached-steps", "service-logs"}) {
		t.Errorf("an agent session: %v", got)
	}
}
