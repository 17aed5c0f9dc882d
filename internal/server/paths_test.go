package server_test

import (
	"context"
	"database/sql"
	"net/url"
	"path/filepath"
	"testing"
	"time"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/server"
	"knotless.dev/knotless/internal/server/servertest"
)

// A repository row written by an older server, under a name today's rule
// refuses, used to panic in repoDir when the lease sweeper released the
// commit of a pipeline whose run it ended: no recover on that goroutine, so
// the whole server went down. Now the sweeper logs the error, the run ends
// errored/runner-lost as any lapsed run, and the server goes on answering.
func TestLeaseSweep_RepositoryStoredUnderANameTodaysRuleRefusesDoesNotCrashTheServer(t *testing.T) {
	t.Parallel()
	f := newFixture(t, servertest.Options{Lease: time.Second})
	_, c := claimedRun(t, f)
	f.Stop()
	db, err := sql.Open("sqlite", "file:"+filepath.Join(f.DataDir, server.DBFile))
	if err != nil {
		t.Fatal(err)
	}
	res, err := db.Exec(`UPDATE repos SET name = '../older rule' WHERE name = 'app'`)
	if err != nil {
		t.Fatal(err)
	}
	if n, _ := res.RowsAffected(); n != 1 {
		t.Fatalf("renamed %d repository rows, want 1", n)
	}
	db.Close()
	f.Restart()

	// The runner never renews: the sweeper ends the run (and, before the
	// fix, panicked releasing its pipeline's commit).
	run := f.WaitRun(t, c.Run.ID, 15*time.Second, func(r api.Run) bool { return api.IsFinal(r.State) })
	if run.State != api.StateErrored || run.Reason != api.ReasonRunnerLost {
		t.Fatalf("run = %s/%s %q, want errored/runner-lost", run.State, run.Reason, run.Message)
	}
	// A sweep after the run ended: the server still answers.
	var after api.Run
	if err := f.Admin().Query(context.Background(), api.MethodGetRun, url.Values{"run": {itoa(c.Run.ID)}}, &after); err != nil {
		t.Fatalf("the server stopped answering after the sweep: %v", err)
	}
}
