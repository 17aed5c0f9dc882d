package server_test

import (
	"context"
	"fmt"
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
	if want := "nightly.yml:3:7: schedule \"0 3 * * *\" (UTC): next run " + sc.NextAt.UTC().Format("2006-01-02 15:04 UTC") + " on main"; !strings.Contains(out, want) {
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
	if want := "Scheduled by \"0 3 * * *\" (UTC) in .knotless/workflows/nightly.yml, due " + due.UTC().Format("2006-01-02 15:04 UTC") + "."; len(r.PipelineNotes) == 0 || r.PipelineNotes[0] != want {
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
	const want = "often.yml:4:7: schedule \"*/2 * * * *\" (UTC): not running: due as often as every 2m, more often than this server allows (at most every 5m: knotless-server --schedule-min-interval)"
	if !strings.Contains(out, want) {
		t.Errorf("the push does not say %q:\n%s", want, out)
	}
	sc := f.oneSchedule(t)
	if sc.NextAt != nil || !strings.Contains(sc.Problem, "more often than this server allows") {
		t.Errorf("the refused schedule is listed as %+v", sc)
	}
	clock.Advance(10 * time.Minute)
	if fire(t, f.Server.Server); len(f.runs(t)) != 0 {
		t.Fatalf("a refused schedule started runs")
	}
}

// A schedule on a branch that does not exist says so on the push and in
// the list; its due time is skipped (no run, the reason kept) and, once
// the branch is pushed, the list says so at once (not at its next time)
// and its next time runs on that branch with that branch's copy of the
// workflow. Pins: a schedule silently never running, and a stale reason
// shown until the next due time.
func TestSchedules_AScheduleOnAMissingBranchSaysSoAndRunsOnceItExists(t *testing.T) {
	f, clock := scheduleFixture(t, servertest.Options{})
	dir := servertest.WorkTree(t, map[string]string{".knotless/workflows/nightly.yml": nightly("release")})
	out := f.PushDirOutput(t, dir, f.repo, f.token, "HEAD:refs/heads/main")
	if !strings.Contains(out, "schedule \"0 3 * * *\" (UTC): not running: branch release does not exist: its times are skipped until it is pushed") {
		t.Errorf("the push does not name the missing branch:\n%s", out)
	}
	sc := f.oneSchedule(t)
	if sc.NextAt != nil || !strings.Contains(sc.Problem, "branch release does not exist") {
		t.Errorf("listed before its time: %+v", sc)
	}
	clock.Advance(25 * time.Hour)
	if fire(t, f.Server.Server); len(f.runs(t)) != 0 {
		t.Fatalf("a schedule on a missing branch started a run")
	}
	if sc = f.oneSchedule(t); !strings.Contains(sc.Problem, "branch release does not exist") || sc.LastAt != nil || sc.NextAt != nil {
		t.Errorf("after the skipped time: %+v", sc)
	}
	servertest.Commit(t, dir, map[string]string{"marker": "release's own"}, "release")
	f.push(t, dir, "HEAD:refs/heads/release")
	if sc = f.oneSchedule(t); sc.Problem != "" || sc.NextAt == nil {
		t.Fatalf("right after release was pushed, the list still says %q (next %v)", sc.Problem, sc.NextAt)
	}
	advanceTo(clock, *sc.NextAt)
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

// A schedule a server refused as due too often runs at its next time
// once a server allowing it (a lower --schedule-min-interval) starts on
// the same data: the refusal moves it to its next time only, and the list
// of the new server shows no stale refusal. Pins: a refused time moved an
// hour ahead, so that the schedule stayed off for an hour after the limit
// was lowered, and the list kept saying the old server's limit.
func TestSchedules_ARefusedScheduleRunsOnceTheLimitAllowsIt(t *testing.T) {
	clock := &servertest.Clock{}
	strict := servertest.Options{Clock: clock, Schedules: server.Schedules{Recheck: time.Hour}}
	f := newFixture(t, strict)
	wf := "on:\n  schedule:\n    - cron: \"*/2 * * * *\"\nsteps:\n  - run: echo often\n"
	f.push(t, servertest.WorkTree(t, map[string]string{".knotless/workflows/often.yml": wf}), "HEAD:refs/heads/main")
	clock.Advance(3 * time.Minute)
	fire(t, f.Server.Server)
	if len(f.runs(t)) != 0 {
		t.Fatalf("the strict server ran a schedule due every 2m")
	}
	f.Stop()

	lenient := strict
	lenient.DataDir, lenient.Schedules.MinInterval = f.DataDir, time.Minute
	g := &fixture{Server: servertest.Start(t, lenient), token: f.token, repo: f.repo}
	sc := g.oneSchedule(t)
	if sc.Problem != "" || sc.NextAt == nil || sc.NextAt.Sub(clock.Now()) > 2*time.Minute {
		t.Fatalf("on the lenient server the schedule is listed as %+v (now %v)", sc, clock.Now())
	}
	advanceTo(clock, *sc.NextAt)
	if n := fire(t, g.Server.Server); n != 1 {
		t.Fatalf("the lenient server started %d pipelines at the schedule's next time, want 1", n)
	}
}

// A push of the default branch says a paused schedule is paused (and how
// to resume it), not a next run it will not make; a file that does not
// parse says its schedules stay as they were. Pins: "next run ..." said
// for a paused schedule, and a typo's schedules kept without a word.
func TestSchedules_APushSaysAPausedScheduleIsPausedAndABrokenFileKeepsItsSchedules(t *testing.T) {
	f, _ := scheduleFixture(t, servertest.Options{})
	dir := servertest.WorkTree(t, map[string]string{".knotless/workflows/nightly.yml": nightly("")})
	f.push(t, dir, "HEAD:refs/heads/main")
	sc := f.oneSchedule(t)
	if err := f.alice().Procedure(context.Background(), api.MethodPauseSchedule, api.PauseScheduleInput{Repo: f.repo, ID: sc.ID, Paused: true}, nil); err != nil {
		t.Fatal(err)
	}
	servertest.Commit(t, dir, map[string]string{"README": "more"}, "more")
	out := f.PushDirOutput(t, dir, f.repo, f.token, "HEAD:refs/heads/main")
	if want := "schedule \"0 3 * * *\" (UTC): paused by alice since "; !strings.Contains(out, want) ||
		!strings.Contains(out, fmt.Sprintf("(knotless schedule resume %d --repo alice/app)", sc.ID)) || strings.Contains(out, "next run") {
		t.Errorf("the push after a pause says:\n%s", out)
	}
	servertest.Commit(t, dir, map[string]string{".knotless/workflows/nightly.yml": "on:\n  schedule:\n    - cron: \"0 25 * * *\"\nsteps:\n  - run: echo\n"}, "typo")
	out = f.PushDirOutput(t, dir, f.repo, f.token, "HEAD:refs/heads/main")
	if !strings.Contains(out, ".knotless/workflows/nightly.yml does not parse, so its 1 schedule stays as it was until it does") ||
		!strings.Contains(out, `.knotless/workflows/nightly.yml:3:13: schedule 1 cron: "0 25 * * *"`) {
		t.Errorf("the push of a broken file says:\n%s", out)
	}
	if sc = f.oneSchedule(t); !sc.Paused || sc.Cron != "0 3 * * *" {
		t.Errorf("the broken file's schedule after the push: %+v", sc)
	}
}
