package server_test

import (
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/server"
	"knotless.dev/knotless/internal/server/servertest"
)

// Issue 14, item 11: updateStep accepted step 2^63-1, after which
// knotless run logs failed for that run.
func TestServer_StepIndexIsCappedSoRunLogsStayReadable(t *testing.T) {
	t.Parallel()
	f := newFixture(t, servertest.Options{})
	r, c := claimedRun(t, f)
	ctx := context.Background()
	id := c.Run.ID
	for _, step := range []int64{math.MaxInt64, server.DefaultMaxStepIndex + 1} {
		err := r.Client.Procedure(ctx, api.MethodUpdateStep, map[string]any{"run": id, "step": step, "state": api.StepRunning}, nil)
		if !api.IsError(err, api.ErrInvalidRequest) || !strings.Contains(err.Error(), "--max-step-index") {
			t.Errorf("updateStep step %d: err = %v, want InvalidRequest naming --max-step-index", step, err)
		}
		if _, err := appendLog(r, id, int(step), 0, "x"); !api.IsError(err, api.ErrInvalidRequest) {
			t.Errorf("appendLog step %d: err = %v, want InvalidRequest", step, err)
		}
	}
	procedure(t, r, api.MethodUpdateStep, api.UpdateStepInput{Run: id, Step: server.DefaultMaxStepIndex, State: api.StepRunning,
		Name: strings.Repeat("n", 10_000), Reason: strings.Repeat("r", 1000)}, nil)
	if _, err := appendLog(r, id, server.DefaultMaxStepIndex, 0, "last\n"); err != nil {
		t.Fatal(err)
	}
	procedure(t, r, api.MethodComplete, api.CompleteInput{Run: id, State: api.StateFailed, Reason: api.ReasonExitCode,
		Message: strings.Repeat("m", 100_000)}, nil)

	// What knotless run logs does: the run, then every step's log.
	run := getRun(t, f, id)
	if len(run.Message) > 5000 || !strings.Contains(run.Message, "[100000 bytes]") {
		t.Errorf("run message of %d bytes, want it cut to about 4 KB, saying how long it was", len(run.Message))
	}
	for _, st := range run.Steps {
		if len(st.Name) > 300 {
			t.Errorf("step %d name of %d bytes, want it cut", st.Index, len(st.Name))
		}
		resp, err := f.alice().Do(ctx, http.MethodGet, api.MethodGetRunLog,
			url.Values{"run": {fmt.Sprint(id)}, "step": {fmt.Sprint(st.Index)}}, "", nil)
		if err != nil {
			t.Fatalf("log of step %d: %v", st.Index, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
}

// Issue 14, item 11: a percent-encoded .. in a git path passed the
// server's own check.
func TestServer_GitPathsAreCheckedAfterDecoding(t *testing.T) {
	t.Parallel()
	f := newFixture(t, servertest.Options{})
	get := func(path string) int {
		req, err := http.NewRequest(http.MethodGet, f.URL+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.SetBasicAuth("x", f.token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, p := range []string{
		"/%2e%2e/app.git/info/refs?service=git-upload-pack",
		"/%2E%2E/alice/app.git/info/refs?service=git-upload-pack",
		"/alice/%2e%2e.git/info/refs?service=git-upload-pack",
		"/alice/app.git/%2e%2e/%2e%2e/%2e%2e/secret.key",
		"/alice/app.git/info/refs/%2e%2e/%2e%2e/config",
		"/%2ealice/app.git/info/refs?service=git-upload-pack",
		"/alice/app.git/objects/info/packs",
		"/alice/app.git/HEAD",
		"/alice/app%2fx.git/info/refs?service=git-upload-pack",
	} {
		if code := get(p); code != http.StatusNotFound {
			t.Errorf("GET %s: %d, want 404", p, code)
		}
	}
	if code := get("/alice/app.git/info/refs?service=git-upload-pack"); code != http.StatusOK {
		t.Errorf("GET info/refs: %d, want 200", code)
	}
}

// Issue 14, item 11: an admin could create handles . and .., and repo
// create ../escape made a repository outside the repositories directory.
func TestServer_HandlesAndRepositoryNamesFollowOneRule(t *testing.T) {
	t.Parallel()
	s := servertest.Start(t, servertest.Options{})
	ctx := context.Background()
	admin := s.Admin()
	for _, h := range []string{".", "..", ".x", "-x", "_x", "a/b", "A"} {
		err := admin.Procedure(ctx, api.MethodCreateAccount, api.CreateAccountInput{Handle: h}, nil)
		if !api.IsError(err, api.ErrInvalidRequest) || !strings.Contains(err.Error(), api.NameRule) {
			t.Errorf("handle %q: err = %v, want InvalidRequest stating the rule", h, err)
		}
	}
	s.CreateAccount(t, "alice")
	for _, n := range []string{"../escape", "../../escape", "./x", "alice/..", "alice/.x", "alice/-x", "alice/_x", "alice/../x", "alice/a/b", "..", "."} {
		if err := admin.Procedure(ctx, api.MethodCreateRepo, api.CreateRepoInput{Repo: n}, nil); !api.IsError(err, api.ErrInvalidRequest) {
			t.Errorf("repository %q: err = %v, want InvalidRequest", n, err)
		}
	}
	// Nothing was made outside DATA/repos.
	for _, p := range []string{filepath.Join(s.DataDir, "escape.git"), filepath.Join(filepath.Dir(s.DataDir), "escape.git"),
		filepath.Join(s.DataDir, server.ReposDir, "escape.git")} {
		if _, err := os.Stat(p); err == nil {
			t.Errorf("%s exists", p)
		}
	}
	// Dots, dashes and underscores inside a name are fine.
	for _, n := range []string{"alice/a.b", "alice/a-b_c", "alice/x..y"} {
		if err := admin.Procedure(ctx, api.MethodCreateRepo, api.CreateRepoInput{Repo: n}, nil); err != nil {
			t.Errorf("repository %q: %v", n, err)
		}
	}
}
