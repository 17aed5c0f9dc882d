package cli

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/server/servertest"
)

// schedulesAt are three schedules as the server lists them at now: one
// that runs (in Berlin's zone), one paused, one whose branch is gone.
func schedulesAt(now time.Time) api.ScheduleList {
	next := now.Add(3*time.Hour + 12*time.Minute)
	last := now.Add(-21 * time.Hour)
	pausedAt := now.Add(-30 * time.Minute)
	return api.ScheduleList{MinIntervalSeconds: 300, Schedules: []api.Schedule{
		{ID: 1, Repo: "alice/app", Workflow: ".knotless/workflows/nightly.yml", Cron: "0 3 * * *", TimeZone: "Europe/Berlin",
			Branch: "main", NextAt: &next, LastAt: &last, LastPipeline: 41},
		{ID: 2, Repo: "alice/app", Workflow: ".knotless/workflows/deps.yml", Cron: "@daily", TimeZone: "UTC",
			Branch: "main", Paused: true, PausedBy: "alice", PausedAt: &pausedAt},
		{ID: 3, Repo: "alice/app", Workflow: ".knotless/workflows/release.yml", Cron: "30 4 * * 1", TimeZone: "UTC",
			Branch: "release", Problem: "branch release does not exist"},
	}}
}

// Each schedule is one line with its workflow's file name, expression and
// zone, branch, the next time in UTC with how soon (or paused by whom and
// since when, or why it does not run) and the latest run's due time and
// pipeline. Pins: a paused or broken schedule shown with no word of it, a
// next time in the reader's local zone without saying so.
func TestScheduleList_OneLineEachWithNextTimeInUTCPausedAndProblem(t *testing.T) {
	now := time.Date(2026, 12, 7, 23, 48, 0, 0, time.UTC)
	var b bytes.Buffer
	if err := printSchedules(&b, "alice/app", schedulesAt(now), now); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
	t.Logf("knotless schedule list:\n%s", b.String())
	if len(lines) != 4 {
		t.Fatalf("%d lines, want a header and 3 schedules", len(lines))
	}
	for i, want := range [][]string{
		{"ID", "WORKFLOW", "CRON", "BRANCH", "NEXT", "LAST"},
		{"1 ", "nightly.yml", "0 3 * * * (Europe/Berlin)", "main", "2026-12-08 03:00 UTC (in 3h 12m)", "2026-12-07 02:48 UTC, pipeline 41"},
		{"2 ", "deps.yml", "@daily (UTC)", "paused by alice since 2026-12-07 23:18 UTC", "never"},
		{"3 ", "release.yml", "30 4 * * 1 (UTC)", "release", "not running: branch release does not exist"},
	} {
		for _, w := range want {
			if !strings.Contains(lines[i], w) {
				t.Errorf("line %d %q lacks %q", i, lines[i], w)
			}
		}
	}
	if strings.Contains(lines[2], "(in ") {
		t.Errorf("the paused schedule shows a next time: %q", lines[2])
	}
}

// A repository without schedules says how to declare one and where the
// docs are. Pins: an empty table, or "No schedules." and nothing to act on.
func TestScheduleList_NoneSaysHowToDeclareOne(t *testing.T) {
	var b bytes.Buffer
	if err := printSchedules(&b, "alice/app", api.ScheduleList{MinIntervalSeconds: 300}, time.Now()); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"No schedules in alice/app.", "schedule:", `- cron: "0 3 * * *"`, `docs/workflow.md, "Schedules"`, "at most every 5m."} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("the empty list lacks %q:\n%s", want, b.String())
		}
	}
}

// How soon a time is reads in at most two units, and a time just passed
// reads as due. Pins: "in 3h12m0s"-style durations, or a negative one.
func TestUntilText_AtMostTwoUnitsAndDueWhenPassed(t *testing.T) {
	now := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	for d, want := range map[time.Duration]string{
		45 * time.Second:                              "in 45s",
		12*time.Minute + 30*time.Second:               "in 12m 30s",
		time.Minute:                                   "in 1m",
		3*time.Hour + 12*time.Minute:                  "in 3h 12m",
		3*time.Hour + 12*time.Minute + 40*time.Second: "in 3h 12m",
		50*time.Hour + 10*time.Minute:                 "in 2d 2h",
		2 * time.Second:                               "in 2s",
		-2 * time.Second:                              "due now",
		-3 * time.Minute:                              "due 3m ago",
	} {
		if got := untilText(now.Add(d), now); got != want {
			t.Errorf("untilText(now%+v) = %q, want %q", d, got, want)
		}
	}
}

// Pause prints the schedule paused with the command that resumes it;
// resume prints the next run. Pins: a pause that prints nothing to undo it
// with, a resume that does not say when the next run is.
func TestScheduleState_PauseSaysHowToResumeAndResumeSaysTheNextRun(t *testing.T) {
	now := time.Date(2026, 12, 7, 23, 48, 0, 0, time.UTC)
	l := schedulesAt(now)
	if got := scheduleState(l.Schedules[1], now); !strings.Contains(got, "Schedule 2 of alice/app (deps.yml, @daily (UTC) on main): paused by alice since ") ||
		!strings.Contains(got, "knotless schedule resume 2 --repo alice/app") {
		t.Errorf("after pause: %q", got)
	}
	if got := scheduleState(l.Schedules[0], now); !strings.Contains(got, "next run 2026-12-08 03:00 UTC (in 3h 12m).") {
		t.Errorf("after resume: %q", got)
	}
}

// Bad arguments are usage errors before any request: an ID that is not a
// positive number, no repository, two different repositories.
func TestSchedule_BadArgumentsAreUsageErrors(t *testing.T) {
	e := isolatedEnv(t).with(EnvServer, "http://127.0.0.1:1", EnvToken, "t")
	for _, args := range [][]string{
		{"schedule", "pause", "x", "--repo", "a/b"},
		{"schedule", "resume", "0", "--repo", "a/b"},
		{"schedule", "pause", "1"},
		{"schedule", "list"},
		{"schedule", "list", "a/b", "--repo", "a/c"},
		{"schedule", "pause"},
	} {
		r := runCLI(t, e, "", nil, args...)
		if r.code != ExitUsage || !strings.HasPrefix(r.stderr, "knotless: ") {
			t.Errorf("%q: exit %d, stderr %q; want %d", args, r.code, r.stderr, ExitUsage)
		}
	}
}

// workflowNightly runs at 03:00 UTC on the default branch, and at 04:30
// on a branch that does not exist.
const workflowNightly = `name: nightly
on:
  schedule:
    - cron: "0 3 * * *"
    - cron: "30 4 * * *"
      branch: release
steps:
  - name: build
    run: echo nightly
`

// Against a real server: schedule list shows the next 03:00 UTC of a
// pushed workflow's schedule and a missing branch's problem; pause shows
// it paused by the admin and list agrees; resume gives the next time
// back; once the time passed and the server fired it, LAST names the
// pipeline and run list its note; an unknown id is not found (exit 5)
// and says how to list them. Pins: a next time other than the server's,
// a pause the list does not show.
func TestSchedule_ListPauseResumeShowTheServersState(t *testing.T) {
	clock := &servertest.Clock{}
	srv := servertest.Start(t, servertest.Options{Clock: clock})
	e := isolatedEnv(t)
	e[EnvServer], e[EnvToken] = srv.URL, srv.AdminToken
	if r := mustRun(t, e, ExitNotFound, nil, "schedule", "list", "admin/app"); !strings.Contains(r.stderr, "no repository admin/app") {
		t.Errorf("list of no such repository: %q", r.stderr)
	}
	mustRun(t, e, ExitOK, nil, "repo", "create", "app")
	if r := mustRun(t, e, ExitOK, nil, "schedule", "list", "admin/app"); !strings.Contains(r.stdout, "No schedules in admin/app.") {
		t.Errorf("no schedules yet:\n%s", r.stdout)
	}
	srv.Push(t, "admin/app", srv.AdminToken, map[string]string{".knotless/workflows/nightly.yml": workflowNightly}, "refs/heads/main")

	now := clock.Now().UTC()
	next := time.Date(now.Year(), now.Month(), now.Day(), 3, 0, 0, 0, time.UTC)
	if !next.After(now) {
		next = next.AddDate(0, 0, 1)
	}
	r := mustRun(t, e, ExitOK, nil, "schedule", "list", "admin/app")
	t.Logf("knotless schedule list admin/app:\n%s", r.stdout)
	lines := strings.Split(r.stdout, "\n")
	if len(lines) < 3 || !strings.Contains(lines[1], "nightly.yml") || !strings.Contains(lines[1], "0 3 * * * (UTC)") ||
		!strings.Contains(lines[1], next.Format("2006-01-02 15:04 UTC")+" (in ") || !strings.Contains(lines[1], "never") {
		t.Fatalf("want schedule 1 next at %s", next.Format(time.RFC3339))
	}
	if !strings.Contains(lines[2], "release") || !strings.Contains(lines[2], "not running: ") || !strings.Contains(lines[2], "release") {
		t.Errorf("the missing branch's schedule: %q", lines[2])
	}
	id := strings.Fields(lines[1])[0]

	r = mustRun(t, e, ExitOK, nil, "schedule", "pause", id, "--repo", "admin/app")
	if !strings.Contains(r.stdout, "paused by admin since ") || !strings.Contains(r.stdout, "knotless schedule resume "+id+" --repo admin/app") {
		t.Errorf("pause printed:\n%s", r.stdout)
	}
	if r := mustRun(t, e, ExitOK, nil, "schedule", "list", "admin/app"); !strings.Contains(r.stdout, "paused by admin") ||
		strings.Contains(strings.Split(r.stdout, "\n")[1], next.Format("2006-01-02 15:04 UTC")) {
		t.Errorf("list after pause:\n%s", r.stdout)
	}
	r = mustRun(t, e, ExitOK, nil, "schedule", "resume", id, "--repo", "admin/app")
	if !strings.Contains(r.stdout, "next run "+next.Format("2006-01-02 15:04 UTC")) {
		t.Errorf("resume printed:\n%s", r.stdout)
	}
	r = mustRun(t, e, ExitNotFound, nil, "schedule", "pause", "99", "--repo", "admin/app")
	if !strings.Contains(r.stderr, "no schedule 99 in admin/app") || !strings.Contains(r.stderr, "knotless schedule list") {
		t.Errorf("pause of no such schedule: %q", r.stderr)
	}

	clock.Advance(next.Sub(now) + time.Minute)
	if n, err := srv.FireSchedules(context.Background()); err != nil || n != 1 {
		t.Fatalf("fire: %d pipelines, %v; want 1", n, err)
	}
	r = mustRun(t, e, ExitOK, nil, "schedule", "list", "admin/app")
	if !strings.Contains(strings.Split(r.stdout, "\n")[1], next.Format("2006-01-02 15:04 UTC")+", pipeline ") {
		t.Errorf("LAST after the schedule fired:\n%s", r.stdout)
	}
	if r := mustRun(t, e, ExitOK, nil, "run", "list", "--repo", "admin/app"); !strings.Contains(r.stdout, "Scheduled by ") || !strings.Contains(r.stdout, "main (scheduled)") {
		t.Errorf("run list of the scheduled run lacks its note or its mark:\n%s", r.stdout)
	}
}
