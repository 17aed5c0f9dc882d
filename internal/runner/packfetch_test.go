package runner

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/server/servertest"
)

// TestMirrors_FetchesTheCommitOfAQueuedRunForcePushedAwayInOneRequest
// pins the fast fetch against a server that serves only reachable
// objects: a run's commit that a force-push took off its branch while the
// run was queued is still fetched by SHA in one request (no `git fetch`
// fallback) with the run's token; once the run ended, nobody fetches it,
// not with the fallback either.
func TestMirrors_FetchesTheCommitOfAQueuedRunForcePushedAwayInOneRequest(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a server")
	}
	srv := servertest.Start(t, servertest.Options{})
	token := srv.CreateAccount(t, "alice")
	srv.CreateRepo(t, token, "app")
	wf := "on:\n  push: {}\nsteps:\n  - run: echo hello\n"
	src := servertest.WorkTree(t, map[string]string{".knotless/workflows/ci.yml": wf, "file.txt": "queued"})
	queued := servertest.Git(t, src, "rev-parse", "HEAD")
	srv.PushDir(t, src, "alice/app", token, "HEAD:refs/heads/main")
	servertest.Git(t, src, "checkout", "-q", "--orphan", "rewrite")
	servertest.Commit(t, src, map[string]string{"file.txt": "rewritten"}, "rewritten")
	srv.PushDir(t, src, "alice/app", token, "+HEAD:refs/heads/main")

	r := srv.RegisterRunner(t, "alice/app", "r1", nil, true)
	var out api.ClaimOutput
	if err := r.Client.Procedure(context.Background(), api.MethodClaim, api.ClaimInput{}, &out); err != nil || out.Run == nil {
		t.Fatalf("claim: %+v, %v", out.Run, err)
	}
	if out.Run.Run.SHA != queued {
		t.Fatalf("claimed the run of %s, want %s", out.Run.Run.SHA, queued)
	}
	url := srv.URL + "/alice/app.git"
	m := &Mirrors{Root: filepath.Join(t.TempDir(), "mirrors")}
	var log bytes.Buffer
	ws := filepath.Join(t.TempDir(), "ws")
	if err := m.Checkout(context.Background(), Fetch{Repo: "alice/app", URL: url, SHA: queued, Token: out.Run.RunToken}, ws, &log); err != nil {
		t.Fatalf("checkout of the queued run's commit: %v\n%s", err, log.String())
	}
	if strings.Contains(log.String(), "git fetch") {
		t.Fatalf("the fetch fell back to git fetch:\n%s", log.String())
	}
	if got, _ := os.ReadFile(filepath.Join(ws, "file.txt")); string(got) != "queued" {
		t.Fatalf("workspace holds %q, want queued", got)
	}

	if err := r.Client.Procedure(context.Background(), api.MethodComplete,
		api.CompleteInput{Run: out.Run.Run.ID, State: api.StateSucceeded}, nil); err != nil {
		t.Fatal(err)
	}
	fresh := &Mirrors{Root: filepath.Join(t.TempDir(), "mirrors")}
	log.Reset()
	err := fresh.Checkout(context.Background(), Fetch{Repo: "alice/app", URL: url, SHA: queued, Token: token},
		filepath.Join(t.TempDir(), "ws"), &log)
	if err == nil {
		t.Fatalf("the owner fetched %s after its only run ended:\n%s", queued, log.String())
	}
	t.Logf("after the run: %v\n%s", err, log.String())
}
