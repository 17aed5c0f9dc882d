package main

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/server/servertest"
	"knotless.dev/knotless/internal/store/postgres/pgtest"
)

// A populated SQLite data directory (accounts and tokens, a repository
// with pushed pipelines, a finished run with its log, a claimed one, a
// runner with a session, a secret) moved to PostgreSQL with `migrate
// --to`: a server on PostgreSQL and the same directory serves all of it,
// the secret still decrypts, the runner's session still holds its claim,
// the schedule keeps its next time, and new rows get ids past the copied
// ones.
func TestMigrate_PopulatedSQLiteDataDirectoryServesTheSameOnPostgres(t *testing.T) {
	pg := pgtest.Start(t)
	dbURL := pg.Database(t)
	dir := t.TempDir()
	ctx := context.Background()

	lite := servertest.Start(t, servertest.Options{DataDir: dir})
	alice := lite.CreateAccount(t, "alice")
	lite.CreateRepo(t, alice, "app")
	wf := "on:\n  push: {}\nsecrets: [TOKEN]\nsteps:\n  - run: echo hi\n"
	nightly := "on:\n  schedule:\n    - cron: \"0 3 * * *\"\nsteps:\n  - run: echo nightly\n"
	lite.Push(t, "alice/app", alice, map[string]string{".knotless/workflows/a.yml": wf, ".knotless/workflows/b.yml": wf,
		".knotless/workflows/nightly.yml": nightly}, "main")
	var before api.ScheduleList
	if err := lite.Client(alice).Query(ctx, api.MethodListSchedules, url.Values{"repo": {"alice/app"}}, &before); err != nil || len(before.Schedules) != 1 {
		t.Fatalf("schedules before the migration: %v, %+v", err, before)
	}
	if err := lite.Client(alice).Procedure(ctx, api.MethodSetSecret, api.SetSecretInput{Repo: "alice/app", Name: "TOKEN", Value: "s3cret"}, nil); err != nil {
		t.Fatal(err)
	}
	r := lite.RegisterRunner(t, "alice/app", "r1", nil, true)
	var first, second api.ClaimOutput
	for _, c := range []*api.ClaimOutput{&first, &second} {
		if err := r.Client.Procedure(ctx, api.MethodClaim, api.ClaimInput{}, c); err != nil || c.Run == nil {
			t.Fatalf("claim: %v, %+v", err, c)
		}
	}
	if got := first.Run.SecretValues()["TOKEN"]; got != "s3cret" {
		t.Fatalf("secret before the migration: %q", got)
	}
	resp, err := r.Client.Do(ctx, http.MethodPost, api.MethodAppendLog, url.Values{"run": {fmt.Sprint(first.Run.Run.ID)},
		"step": {"1"}, "offset": {"0"}}, "application/octet-stream", strings.NewReader("hi\n"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	zero := 0
	if err := r.Client.Procedure(ctx, api.MethodComplete, api.CompleteInput{Run: first.Run.Run.ID, State: api.StateSucceeded, ExitCode: &zero}, nil); err != nil {
		t.Fatal(err)
	}
	admin := lite.AdminToken
	lite.Stop()

	var stdout, stderr strings.Builder
	if code := execute(ctx, []string{"migrate", "--data", dir, "--to", dbURL}, &stdout, &stderr); code != exitOK {
		t.Fatalf("migrate: exit %d\n%s%s", code, stdout.String(), stderr.String())
	}
	t.Logf("migrate printed:\n%s", stdout.String())
	if !strings.Contains(stdout.String(), "runs                        2 rows") {
		t.Errorf("migrate's summary does not count the 2 runs:\n%s", stdout.String())
	}
	// Into a database that is no longer empty: refused.
	if code := execute(ctx, []string{"migrate", "--data", dir, "--to", dbURL}, &stdout, &stderr); code != exitError ||
		!strings.Contains(stderr.String(), "new, empty database") {
		t.Errorf("second migrate into the same database: exit %d, %s", code, stderr.String())
	}

	pgs := servertest.Start(t, servertest.Options{DataDir: dir, Database: dbURL})
	if pgs.AdminToken != admin {
		t.Errorf("admin token changed across the migration")
	}
	var runs api.ListRunsOutput
	if err := pgs.Client(alice).Query(ctx, api.MethodListRuns, url.Values{"repo": {"alice/app"}}, &runs); err != nil {
		t.Fatalf("alice's token after the migration: %v", err)
	}
	if len(runs.Runs) != 2 {
		t.Fatalf("runs after the migration: %+v", runs.Runs)
	}
	var moved api.ScheduleList
	if err := pgs.Client(alice).Query(ctx, api.MethodListSchedules, url.Values{"repo": {"alice/app"}}, &moved); err != nil ||
		len(moved.Schedules) != 1 || moved.Schedules[0].NextAt == nil || !moved.Schedules[0].NextAt.Equal(*before.Schedules[0].NextAt) {
		t.Errorf("the schedule after the migration: %v, %+v (before: %+v)", err, moved, before)
	}
	done := pgs.WaitRun(t, first.Run.Run.ID, 10*time.Second, func(api.Run) bool { return true })
	if done.State != api.StateSucceeded || done.Runner != "r1" {
		t.Errorf("finished run after the migration: %s by %q", done.State, done.Runner)
	}
	var logText strings.Builder
	lresp, err := pgs.Client(alice).Do(ctx, http.MethodGet, api.MethodGetRunLog, url.Values{"run": {fmt.Sprint(first.Run.Run.ID)}, "step": {"1"}}, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	n, _ := lresp.Body.Read(buf)
	lresp.Body.Close()
	logText.Write(buf[:n])
	if logText.String() != "hi\n" {
		t.Errorf("log after the migration: %q", logText.String())
	}
	// The runner's session and claim carry over: it heartbeats its run.
	var hb api.HeartbeatOutput
	c := *r.ClientWithSession(r.Session())
	c.BaseURL = pgs.URL // the new server's address
	if err := c.Procedure(ctx, api.MethodHeartbeat, api.HeartbeatInput{Run: second.Run.Run.ID}, &hb); err != nil {
		t.Fatalf("heartbeat of the claimed run after the migration: %v", err)
	}
	// A new push gets a pipeline and runs with ids past the copied ones,
	// and the secret still decrypts for them.
	pgs.Push(t, "alice/app", alice, map[string]string{".knotless/workflows/a.yml": wf + "# again\n"}, "next")
	var after api.ListRunsOutput
	if err := pgs.Client(alice).Query(ctx, api.MethodListRuns, url.Values{"repo": {"alice/app"}}, &after); err != nil {
		t.Fatal(err)
	}
	if len(after.Runs) != 3 || after.Runs[0].ID <= second.Run.Run.ID {
		t.Fatalf("runs after a new push: %+v", after.Runs)
	}
}
