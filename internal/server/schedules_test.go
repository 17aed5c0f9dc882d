package server_test

import (
	"context"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/server"
	"knotless.dev/knotless/internal/server/servertest"
)

// nightly is a workflow run only by its schedule: 03:00 UTC each day,
// on branch (the default branch when "").
func nightly(branch string) string {
	b := ""
	if branch != "" {
		b = "      branch: " + branch + "\n"
	}
	return "on:\n  schedule:\n    - cron: \"0 3 * * *\"\n" + b + "steps:\n  - run: echo nightly\n"
}

// scheduleFixture is a fixture whose clock the test moves, and whose
// firing loop does not wake on its own within a test (the test fires).
func scheduleFixture(t *testing.T, opts servertest.Options) (*fixture, *servertest.Clock) {
	t.Helper()
	clock := &servertest.Clock{}
	opts.Clock = clock
	opts.Schedules.Recheck = time.Hour
	return newFixture(t, opts), clock
}

// schedules lists the repository's schedules as alice.
func (f *fixture) schedules(t *testing.T) []api.Schedule {
	t.Helper()
	var out api.ScheduleList
	if err := f.alice().Query(context.Background(), api.MethodListSchedules, url.Values{"repo": {f.repo}}, &out); err != nil {
		t.Fatal(err)
	}
	return out.Schedules
}

// oneSchedule is the repository's only schedule.
func (f *fixture) oneSchedule(t *testing.T) api.Schedule {
	t.Helper()
	list := f.schedules(t)
	if len(list) != 1 {
		t.Fatalf("the repository has %d schedules, want 1: %+v", len(list), list)
	}
	return list[0]
}

// advanceTo moves clock just past at.
func advanceTo(clock *servertest.Clock, at time.Time) {
	clock.Advance(at.Sub(clock.Now()) + time.Second)
}

// fire fires what is due on srv and fails the test on an error.
func fire(t *testing.T, srv *server.Server) int {
	t.Helper()
	n, err := srv.FireSchedules(context.Background())
	if err != nil {
		t.Fatalf("fire schedules: %v", err)
	}
	return n
}

// A schedule's due time starts one pipeline, of event and actor
// "schedule", on the default branch's tip, whose notes say which schedule
// and when; firing again at the same time starts nothing, and the next
// time is a day later. Pins: a due time fired twice by two passes.
func TestSchedules_ADueTimeStartsOnePipelineMarkedAsScheduled(t *testing.T) {
	f, clock := scheduleFixture(t, servertest.Options{})
	out := f.PushDirOutput(t, servertest.WorkTree(t, map[string]string{".knotless/workflows/nightly.yml": nightly("")}), f.repo, f.token, "HEAD:refs/heads/main")
	sc := f.oneSchedule(t)
	if sc.NextAt == nil || sc.NextAt.UTC().Hour() != 3 || sc.NextAt.Minute() != 0 || !sc.NextAt.After(clock.Now()) || sc.Branch != "main" {
		t.Fatalf("schedule after the push: %+v", sc)
	}
	if want := "nightly.yml:3:7: schedule `0 3 * * *` (UTC): next run " + sc.NextAt.UTC().Format("2006-01-02 15:04 UTC") + " on main"; !strings.Contains(out, want) {
		t.Errorf("the push does not say %q:\n%s", want, out)
	}
	if n := fire(t, f.Server.Server); n != 0 || len(f.runs(t)) != 0 {
		t.Fatalf("a schedule not yet due started %d pipelines", n)
	}
	due := *sc.NextAt
	advanceTo(clock, due)
	fire(t, f.Server.Server)
	fire(t, f.Server.Server)
	runs := f.runs(t)
	if len(runs) != 1 {
		t.Fatalf("one due time made %d runs, want 1", len(runs))
	}
	r := runs[0]
	if r.Event != api.EventSchedule || r.Actor != api.ScheduleActor || r.Ref != "refs/heads/main" || r.State != api.StateQueued {
		t.Errorf("the scheduled run: event %q actor %q ref %q state %q", r.Event, r.Actor, r.Ref, r.State)
	}
	if want := "Scheduled by `0 3 * * *` (UTC) in .knotless/workflows/nightly.yml, due " + due.UTC().Format("2006-01-02 15:04 UTC") + "."; len(r.PipelineNotes) == 0 || r.PipelineNotes[0] != want {
		t.Errorf("the pipeline's notes %q, want first %q", r.PipelineNotes, want)
	}
	sc = f.oneSchedule(t)
	if sc.LastAt == nil || !sc.LastAt.Equal(due) || sc.LastPipeline != r.Pipeline || sc.NextAt == nil || !sc.NextAt.Equal(due.Add(24*time.Hour)) || sc.Problem != "" {
		t.Errorf("the schedule after firing: %+v", sc)
	}
}

// After three days without a firing (the server down), the latest missed
// time runs once and its notes say how many earlier ones passed; nothing
// bursts. Pins: every missed time started on the server's return.
func TestSchedules_TimesMissedWhileDownRunTheLatestOnceAndSaySo(t *testing.T) {
	f, clock := scheduleFixture(t, servertest.Options{})
	f.push(t, servertest.WorkTree(t, map[string]string{".knotless/workflows/nightly.yml": nightly("")}), "HEAD:refs/heads/main")
	first := *f.oneSchedule(t).NextAt
	advanceTo(clock, first.Add(72*time.Hour))
	fire(t, f.Server.Server)
	runs := f.runs(t)
	if len(runs) != 1 {
		t.Fatalf("four missed times made %d runs, want 1", len(runs))
	}
	notes := strings.Join(runs[0].PipelineNotes, "\n")
	if !strings.Contains(notes, "due "+first.Add(72*time.Hour).UTC().Format("2006-01-02 15:04 UTC")) ||
		!strings.Contains(notes, "3 earlier times passed while no server could start them; only the latest runs.") {
		t.Errorf("the notes of the run after the downtime:\n%s", notes)
	}
	if sc := f.oneSchedule(t); !sc.NextAt.Equal(first.Add(96 * time.Hour)) {
		t.Errorf("next time %v, want %v", sc.NextAt, first.Add(96*time.Hour))
	}
}

// A schedule due more often than --schedule-min-interval is refused: the
// push says so at FILE:LINE:COL, the list says so with no next time, and
// it never starts a run. Pins: an every-minute schedule flooding the
// runners.
func TestSchedules_AScheduleDueMoreOftenThanTheServerAllowsNeverRuns(t *testing.T) {
	f, clock := scheduleFixture(t, servertest.Options{})
	wf := "on:\n  push: {branches: []}\n  schedule:\n    - cron: \"*/2 * * * *\"\nsteps:\n  - run: echo often\n"
	out := f.PushDirOutput(t, servertest.WorkTree(t, map[string]string{".knotless/workflows/often.yml": wf}), f.repo, f.token, "HEAD:refs/heads/main")
	const want = "often.yml:4:7: schedule `*/2 * * * *` (UTC): it is due every 2m at times, more often than this server runs a schedule (every 5m at most: knotless-server --schedule-min-interval); it does not run"
	if !strings.Contains(out, want) {
		t.Errorf("the push does not say %q:\n%s", want, out)
	}
	sc := f.oneSchedule(t)
	if sc.NextAt != nil || !strings.Contains(sc.Problem, "more often than this server runs a schedule") {
		t.Errorf("the refused schedule is listed as %+v", sc)
	}
	clock.Advance(10 * time.Minute)
	if fire(t, f.Server.Server); len(f.runs(t)) != 0 {
		t.Fatalf("a refused schedule started runs")
	}
}

// A schedule on a branch that does not exist says so on the push and in
// the list; its due time is skipped (no run, the reason kept) and, once
// the branch is pushed, its next time runs on that branch with that
// branch's copy of the workflow. Pins: a schedule silently never
// running.
func TestSchedules_AScheduleOnAMissingBranchSaysSoAndRunsOnceItExists(t *testing.T) {
	f, clock := scheduleFixture(t, servertest.Options{})
	dir := servertest.WorkTree(t, map[string]string{".knotless/workflows/nightly.yml": nightly("release")})
	out := f.PushDirOutput(t, dir, f.repo, f.token, "HEAD:refs/heads/main")
	if !strings.Contains(out, "schedule `0 3 * * *` (UTC): branch release does not exist: its times are skipped until it is pushed") {
		t.Errorf("the push does not name the missing branch:\n%s", out)
	}
	sc := f.oneSchedule(t)
	advanceTo(clock, *sc.NextAt)
	if fire(t, f.Server.Server); len(f.runs(t)) != 0 {
		t.Fatalf("a schedule on a missing branch started a run")
	}
	if sc = f.oneSchedule(t); !strings.Contains(sc.Problem, "branch release does not exist") || sc.LastAt != nil {
		t.Errorf("after the skipped time: %+v", sc)
	}
	servertest.Commit(t, dir, map[string]string{"marker": "release's own"}, "release")
	f.push(t, dir, "HEAD:refs/heads/release")
	advanceTo(clock, *f.oneSchedule(t).NextAt)
	fire(t, f.Server.Server)
	runs := f.runs(t)
	if len(runs) != 1 || runs[0].Ref != "refs/heads/release" || runs[0].Event != api.EventSchedule {
		t.Fatalf("after release was pushed: %+v", runs)
	}
	if sc = f.oneSchedule(t); sc.Problem != "" {
		t.Errorf("the problem stayed after a run: %q", sc.Problem)
	}
}

// A paused schedule shows no next time and starts nothing; resumed, its
// next time is after now, so the times passed while paused never run.
// Pins: resuming bursting the paused times, or a pause lost on a push.
func TestSchedules_APausedScheduleStartsNothingAndResumesAtItsNextTime(t *testing.T) {
	f, clock := scheduleFixture(t, servertest.Options{})
	dir := servertest.WorkTree(t, map[string]string{".knotless/workflows/nightly.yml": nightly("")})
	f.push(t, dir, "HEAD:refs/heads/main")
	sc := f.oneSchedule(t)
	var got api.Schedule
	if err := f.alice().Procedure(context.Background(), api.MethodPauseSchedule, api.PauseScheduleInput{Repo: f.repo, ID: sc.ID, Paused: true}, &got); err != nil {
		t.Fatal(err)
	}
	if !got.Paused || got.PausedBy != "alice" || got.NextAt != nil {
		t.Fatalf("paused: %+v", got)
	}
	servertest.Commit(t, dir, map[string]string{"README": "another commit"}, "more")
	f.push(t, dir, "HEAD:refs/heads/main")
	if sc = f.oneSchedule(t); !sc.Paused {
		t.Fatalf("a push of the default branch resumed the schedule")
	}
	clock.Advance(50 * time.Hour)
	if fire(t, f.Server.Server); len(f.runs(t)) != 0 {
		t.Fatalf("a paused schedule started runs")
	}
	got = api.Schedule{}
	if err := f.alice().Procedure(context.Background(), api.MethodPauseSchedule, api.PauseScheduleInput{Repo: f.repo, ID: sc.ID}, &got); err != nil {
		t.Fatal(err)
	}
	if got.Paused || got.NextAt == nil || !got.NextAt.After(clock.Now()) {
		t.Fatalf("resumed: %+v", got)
	}
	if fire(t, f.Server.Server); len(f.runs(t)) != 0 {
		t.Fatalf("resuming ran the times passed while paused")
	}
	bob := f.CreateAccount(t, "bob")
	if err := f.Client(bob).Procedure(context.Background(), api.MethodPauseSchedule, api.PauseScheduleInput{Repo: f.repo, ID: sc.ID, Paused: true}, &got); err == nil {
		t.Errorf("another account paused alice's schedule")
	}
}

// Two replicas on one PostgreSQL database, each firing the same due time
// from several goroutines at once, start exactly one pipeline; and a
// replica that stops between reading the due schedule and committing its
// pipeline (its request cancelled) leaves the time due, and the other
// replica runs it. Pins: two pipelines for one time, or a time lost with
// a replica dying at the moment of firing.
func TestSchedules_OneDueTimeStartsOnePipelineAcrossReplicasAndSurvivesOneDyingAtFiring(t *testing.T) {
	clock := &servertest.Clock{}
	a, b := replicas(t, servertest.Options{Clock: clock, Schedules: server.Schedules{Recheck: time.Hour}})
	a.push(t, servertest.WorkTree(t, map[string]string{".knotless/workflows/nightly.yml": nightly("")}), "HEAD:refs/heads/main")
	first := *a.oneSchedule(t).NextAt
	advanceTo(clock, first)
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		srv := a.Server.Server
		if i%2 == 1 {
			srv = b.Server
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := srv.FireSchedules(context.Background()); err != nil {
				t.Errorf("fire: %v", err)
			}
		}()
	}
	wg.Wait()
	if runs := a.runs(t); len(runs) != 1 {
		t.Fatalf("eight passes on two replicas made %d runs of one due time, want 1", len(runs))
	}

	advanceTo(clock, first.Add(24*time.Hour))
	ctx, cancel := context.WithCancel(context.Background())
	server.SetScheduleFireHook(func(int64) { cancel() })
	_, err := a.Server.FireSchedules(ctx)
	server.SetScheduleFireHook(nil)
	if err == nil {
		t.Fatalf("the firing cancelled before its commit reported no error")
	}
	if runs := a.runs(t); len(runs) != 1 {
		t.Fatalf("a firing cancelled before its commit made a run (%d runs)", len(runs))
	}
	if n := fire(t, b.Server); n != 1 {
		t.Fatalf("the other replica started %d pipelines for the time the first lost, want 1", n)
	}
	if runs := a.runs(t); len(runs) != 2 {
		t.Fatalf("%d runs after the second day, want 2", len(runs))
	}
}

// No account may be called "schedule", the actor of scheduled runs, so
// a run's actor "schedule" always means its schedule started it. Pins: a
// person's pushes shown as if a schedule had started them.
func TestSchedules_TheScheduleActorIsNoAccountsHandle(t *testing.T) {
	f := newFixture(t, servertest.Options{})
	err := f.Admin().Procedure(context.Background(), api.MethodCreateAccount, api.CreateAccountInput{Handle: api.ScheduleActor}, nil)
	if err == nil || !strings.Contains(err.Error(), "reserved") {
		t.Fatalf("creating an account named %q: %v", api.ScheduleActor, err)
	}
}
