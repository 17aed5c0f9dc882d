package server_test

import (
	"context"
	"fmt"
	"io"
	"net/url"
	"testing"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/server/servertest"
)

// fixture is a server with one account "alice" owning "alice/app".
type fixture struct {
	*servertest.Server
	token string // alice's API token
	repo  string // "alice/app"
}

func newFixture(t *testing.T, opts servertest.Options) *fixture {
	t.Helper()
	s := servertest.Start(t, opts)
	tok := s.CreateAccount(t, "alice")
	s.CreateRepo(t, tok, "app")
	return &fixture{Server: s, token: tok, repo: "alice/app"}
}

func (f *fixture) alice() *api.Client { return f.Client(f.token) }

// push pushes refspecs of the work tree dir to the fixture's repository
// as alice.
func (f *fixture) push(t *testing.T, dir string, refspecs ...string) {
	t.Helper()
	f.PushDir(t, dir, f.repo, f.token, refspecs...)
}

// runs lists the runs of the fixture's repository, newest first.
func (f *fixture) runs(t *testing.T) []api.Run {
	t.Helper()
	var out api.ListRunsOutput
	if err := f.alice().Query(context.Background(), api.MethodListRuns, url.Values{"repo": {f.repo}}, &out); err != nil {
		t.Fatal(err)
	}
	return out.Runs
}

// runLog reads a step's whole log.
func (f *fixture) runLog(t *testing.T, run int64, step int) string {
	t.Helper()
	resp, err := f.alice().Do(context.Background(), "GET", api.MethodGetRunLog,
		url.Values{"run": {fmt.Sprint(run)}, "step": {fmt.Sprint(step)}}, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// byWorkflow indexes runs by workflow path.
func byWorkflow(runs []api.Run) map[string]api.Run {
	m := map[string]api.Run{}
	for _, r := range runs {
		m[r.WorkflowPath] = r
	}
	return m
}

// queuedWorkflow is a valid workflow text selected by pushes to branches.
func queuedWorkflow(extra string) string {
	return "on:\n  push: {}\n  manual: {}\n" + extra + "steps:\n  - run: echo hello\n"
}

func itoa(n int64) string { return fmt.Sprint(n) }
