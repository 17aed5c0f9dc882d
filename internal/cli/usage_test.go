package cli

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/server"
	"knotless.dev/knotless/internal/server/servertest"
)

// knotless run logs of a run whose logs expired prints the server's
// sentence with the date (exit 1), repo usage shows the logs, outputs,
// caches and what expired, and repo set-retention sets and says the
// rules. Pins: run logs printing an empty log for an expired run, or
// usage without the expired run.
func TestRepoUsage_ExpiredLogsSayWhenAndUsageShowsWhatIsKept(t *testing.T) {
	clock, srv, e, run := oneSucceededRun(t)

	r := mustRun(t, e, ExitOK, nil, "repo", "usage", "admin/app")
	for _, want := range []string{"logs", "3 step logs", "outputs", "caches", "Retention: Kept forever."} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("repo usage before expiry lacks %q:\n%s", want, r.stdout)
		}
	}
	r = mustRun(t, e, ExitOK, nil, "repo", "set-retention", "admin/app", "--keep-logs-days", "3")
	if !strings.Contains(r.stdout, "Kept for 3 days after a run ends.") || !strings.Contains(r.stdout, "by admin") {
		t.Errorf("set-retention printed:\n%s", r.stdout)
	}
	clock.Advance(4 * 24 * time.Hour)
	if p, err := srv.ExpireRuns(context.Background(), server.Retention{}); err != nil || p.Expired != 1 {
		t.Fatalf("retention pass: %+v, %v; want run %d expired", p, err, run.ID)
	}
	r = mustRun(t, e, ExitFailed, nil, "run", "logs", fmt.Sprint(run.ID))
	date := clock.Now().UTC().Format("2006-01-02")
	if !strings.HasPrefix(r.stderr, fmt.Sprintf("knotless: the logs of run %d expired on %s", run.ID, date)) {
		t.Errorf("run logs of an expired run: stderr\n%s\nwant it to say the logs expired on %s", r.stderr, date)
	}
	r = mustRun(t, e, ExitOK, nil, "repo", "usage", "admin/app")
	t.Logf("knotless repo usage admin/app:\n%s", r.stdout)
	if !strings.Contains(r.stdout, "Retention removed the logs and outputs of 1 run") || !strings.Contains(r.stdout, "0 step logs") {
		t.Errorf("repo usage after expiry:\n%s", r.stdout)
	}
	mustRun(t, e, ExitUsage, nil, "repo", "set-retention", "admin/app")
	mustRun(t, e, ExitUsage, nil, "repo", "set-retention", "admin/app", "--keep-pipelines", "-2")
	r = mustRun(t, e, ExitOK, nil, "repo", "set-retention", "admin/app", "--keep-logs-days", "server")
	if !strings.Contains(r.stdout, "Kept forever.") {
		t.Errorf("back to the server's setting:\n%s", r.stdout)
	}
}

// knotless run show of a run whose logs expired says so with the date,
// in place of the logs' sizes and the hint to read them; run logs --step
// prints only the server's sentence, no step header before it. Pins: run
// show listing "LOG 0 B" per step and "Logs: knotless run logs N" for
// logs that are gone, and a header printed above the refusal.
func TestRunShow_ExpiredLogsSayWhenInsteadOfSizes(t *testing.T) {
	clock, srv, e, run := oneSucceededRun(t)
	id := fmt.Sprint(run.ID)
	if r := mustRun(t, e, ExitOK, nil, "run", "show", id); !strings.Contains(r.stdout, "Logs: knotless run logs "+id) {
		t.Fatalf("run show before expiry:\n%s", r.stdout)
	}
	mustRun(t, e, ExitOK, nil, "repo", "set-retention", "admin/app", "--keep-logs-days", "3")
	clock.Advance(4 * 24 * time.Hour)
	if p, err := srv.ExpireRuns(context.Background(), server.Retention{}); err != nil || p.Expired != 1 {
		t.Fatalf("retention pass: %+v, %v; want run %d expired", p, err, run.ID)
	}
	date := clock.Now().UTC().Format("2006-01-02")
	r := mustRun(t, e, ExitOK, nil, "run", "show", id)
	if !strings.Contains(r.stdout, fmt.Sprintf("Logs: the logs of run %d expired on %s", run.ID, date)) ||
		strings.Contains(r.stdout, "0 B") || strings.Contains(r.stdout, "knotless run logs") {
		t.Errorf("run show of an expired run:\n%s\nwant the logs said expired on %s, no sizes, no hint to read them", r.stdout, date)
	}
	r = mustRun(t, e, ExitFailed, nil, "run", "logs", id, "--step", "1")
	if r.stdout != "" || !strings.Contains(r.stderr, "expired on "+date) {
		t.Errorf("run logs --step 1 of an expired run: stdout %q, stderr %q; want only the error", r.stdout, r.stderr)
	}
}

// Once every rule of a repository's own is returned to the server's, the
// retention sentence says the server's setting applies, whoever last set
// them; while one is left it names who set it. Pins: "Set for alice/app
// by alice (the server's: ...)" after --keep-logs-days server
// --keep-pipelines server.
func TestRetentionText_NoRuleOfItsOwnLeftSaysTheServersApplies(t *testing.T) {
	days := 3
	r := api.Retention{Repo: "alice/app", SetBy: "alice", Effective: api.RetentionRules{KeepLogsDays: 7}, Server: api.RetentionRules{KeepLogsDays: 7}}
	if got := retentionText(r); strings.Contains(got, "Set for") || !strings.Contains(got, "The server's setting") {
		t.Errorf("no rule of its own left: %q; want the server's setting said to apply", got)
	}
	r.Own.KeepLogsDays, r.Effective.KeepLogsDays = &days, days
	if got := retentionText(r); !strings.Contains(got, "Set for alice/app by alice") {
		t.Errorf("a rule of its own: %q; want who set it", got)
	}
}

// Counts of one outputs entry are singular. Pins: "1 entries" in run
// show's and run outputs' lines.
func TestEntries_OneIsSingular(t *testing.T) {
	for n, want := range map[int]string{0: "0 entries", 1: "1 entry", 2: "2 entries"} {
		if got := entries(n); got != want {
			t.Errorf("entries(%d) = %q, want %q", n, got, want)
		}
	}
}

// oneSucceededRun starts a server on a fake clock, makes admin/app and
// plays one run of workflowTwoSteps to success on a registered runner; e
// is the CLI's environment, logged in as the admin.
func oneSucceededRun(t *testing.T) (*servertest.Clock, *servertest.Server, map[string]string, api.Run) {
	t.Helper()
	clock := &servertest.Clock{}
	srv := servertest.Start(t, servertest.Options{Clock: clock})
	e := isolatedEnv(t)
	e[EnvServer], e[EnvToken] = srv.URL, srv.AdminToken
	mustRun(t, e, ExitOK, nil, "repo", "create", "app")
	rn := srv.RegisterRunner(t, "admin/app", "build-1", nil, true)
	srv.Push(t, "admin/app", srv.AdminToken, map[string]string{".knotless/workflows/ci.yml": workflowTwoSteps}, "refs/heads/main")
	steps := []stepScript{
		{name: "build", log: "ok\n", state: api.StepSucceeded},
		{name: "test", log: "ok\n", state: api.StepSucceeded},
	}
	return clock, srv, e, playRun(t, rn, "setup\n", steps, api.StateSucceeded, 0, nil)
}
