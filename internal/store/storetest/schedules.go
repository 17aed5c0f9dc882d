package storetest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/store"
)

// The scheduled runs' tests (issue 38) join the suite from here, as the
// retention tests do.
func init() {
	type test = struct {
		name string
		fn   func(*testing.T, Opener)
	}
	type replicaTest = struct {
		name string
		fn   func(*testing.T, Replicas)
	}
	tests = append(tests,
		test{"SyncSchedules_KeptKeysKeepTheirRowGoneKeysGoNewKeysComeOnce", testSyncSchedules_KeptKeysKeepTheirRowGoneKeysGoNewKeysComeOnce},
		test{"DueSchedules_UnpausedDueByTimeThenIDUpToTheLimit", testDueSchedules_UnpausedDueByTimeThenIDUpToTheLimit},
		test{"SkipSchedule_MovesOnlyTheDueTimeRead", testSkipSchedule_MovesOnlyTheDueTimeRead},
		test{"PauseSchedule_APausedScheduleNeverFiresAndResumingPassesOverItsMissedTimes", testPauseSchedule_APausedScheduleNeverFiresAndResumingPassesOverItsMissedTimes},
		test{"CreatePipeline_AScheduleFiresEachDueTimeOnce", testCreatePipeline_AScheduleFiresEachDueTimeOnce},
		test{"CreatePipeline_AFireThatDoesNotCommitLeavesItsTimeDue", testCreatePipeline_AFireThatDoesNotCommitLeavesItsTimeDue},
		test{"Schedules_GoWithTheirRepository", testSchedules_GoWithTheirRepository},
	)
	replicaTests = append(replicaTests,
		replicaTest{"CreatePipeline_ADueTimeStartsOnePipelineOnReplicasRacing", testCreatePipeline_ADueTimeStartsOnePipelineOnReplicasRacing},
		replicaTest{"CreatePipeline_AReplicaDyingMidFireLeavesTheTimeDueForAnother", testCreatePipeline_AReplicaDyingMidFireLeavesTheTimeDueForAnother},
		replicaTest{"SyncSchedules_ReplicasSyncingAtOnceAllSucceed", testSyncSchedules_ReplicasSyncingAtOnceAllSucceed},
	)
}

// schedT0 is the tests' clock: whole milliseconds, as stored.
var schedT0 = time.UnixMilli(1_800_000_000_000).UTC()

func newSchedule(workflow, cron, branch string, next time.Time) store.NewSchedule {
	return store.NewSchedule{ScheduleKey: store.ScheduleKey{Workflow: ".knotless/workflows/" + workflow + ".yml",
		Cron: cron, TimeZone: "UTC", Branch: branch}, NextAt: next}
}

// syncSchedules syncs want into repo and returns the schedules by key.
func syncSchedules(t *testing.T, db store.Store, repo int64, want ...store.NewSchedule) map[store.ScheduleKey]store.Schedule {
	t.Helper()
	got, err := db.SyncSchedules(context.Background(), repo, want)
	if err != nil {
		t.Fatal(err)
	}
	out := map[store.ScheduleKey]store.Schedule{}
	for _, s := range got {
		out[s.ScheduleKey] = s
	}
	return out
}

// fire creates a pipeline of one queued run that fires schedule s's time
// expected (due then, next an hour later).
func fire(ctx context.Context, db store.Store, s store.Schedule, expected time.Time, runs ...store.NewRun) (store.Pipeline, error) {
	if runs == nil {
		runs = []store.NewRun{{Workflow: "nightly", WorkflowPath: s.Workflow, Source: "src", State: api.StateQueued}}
	}
	p, _, err := db.CreatePipeline(ctx, store.NewPipeline{RepoID: s.RepoID, Ref: "refs/heads/main", SHA: "abc",
		Event: api.EventSchedule, Actor: api.ScheduleActor, Runs: runs,
		Schedule: &store.ScheduleFire{ID: s.ID, Expected: expected, Due: expected, Next: expected.Add(time.Hour)}})
	return p, err
}

// countRows counts a table's rows, for the tests that prove nothing was
// written; it skips them on a store without SQL.
func countRows(t *testing.T, db store.Store, table string) int {
	t.Helper()
	raw, ok := db.(rawSQL)
	if !ok {
		t.Skip("this store has no SQL to count rows in")
	}
	var n int
	if err := raw.SQL().QueryRowContext(context.Background(), `SELECT COUNT(*) FROM `+table).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// A sync keeps the row of each key it is given again (id, NextAt, pause;
// only Problem is replaced), removes the keys not given, adds new keys
// with their NextAt, counts a key given twice once, and leaves other
// repositories' schedules alone. Pins: a push of the default branch
// resetting every schedule's NextAt (a due time fired twice, or never) or
// unpausing it.
func testSyncSchedules_KeptKeysKeepTheirRowGoneKeysGoNewKeysComeOnce(t *testing.T, open Opener) {
	db := open(t)
	ctx := context.Background()
	repo, _ := seed(t, db, 0)
	other, err := db.CreateRepo(ctx, repo.OwnerID, "other", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	a, b, c, d := newSchedule("a", "0 3 * * *", "", schedT0.Add(time.Hour)), newSchedule("b", "@daily", "release", schedT0.Add(2*time.Hour)),
		newSchedule("c", "*/30 * * * *", "", schedT0.Add(3*time.Hour)), newSchedule("d", "0 4 * * 1", "", schedT0.Add(4*time.Hour))
	dupA := a
	dupA.NextAt, dupA.Problem = schedT0.Add(9*time.Hour), "the duplicate"
	first := syncSchedules(t, db, repo.ID, a, b, dupA, d)
	if len(first) != 3 || !first[a.ScheduleKey].NextAt.Equal(a.NextAt) || first[a.ScheduleKey].Problem != "" ||
		first[a.ScheduleKey].Repo != "alice/app" || first[a.ScheduleKey].CreatedAt.IsZero() {
		t.Fatalf("first sync = %+v, want a (once, its first NextAt), b and d of alice/app", first)
	}
	kept := syncSchedules(t, db, other.ID, a)[a.ScheduleKey]
	if _, err := db.SkipSchedule(ctx, first[a.ScheduleKey].ID, a.NextAt, schedT0.Add(5*time.Hour), "skipped"); err != nil {
		t.Fatal(err)
	}
	if _, err := db.PauseSchedule(ctx, first[b.ScheduleKey].ID, true, "alice", schedT0, time.Time{}); err != nil {
		t.Fatal(err)
	}
	a2, b2 := a, b
	a2.NextAt, a2.Problem = schedT0.Add(10*time.Hour), "fires too often"
	b2.NextAt = schedT0.Add(11 * time.Hour)
	second := syncSchedules(t, db, repo.ID, a2, b2, c)
	sa, sb, sc := second[a.ScheduleKey], second[b.ScheduleKey], second[c.ScheduleKey]
	if len(second) != 3 || sa.ID != first[a.ScheduleKey].ID || !sa.NextAt.Equal(schedT0.Add(5*time.Hour)) || sa.Problem != "fires too often" {
		t.Errorf("kept a = %+v, want its row (id %d), the NextAt it was moved to, the new problem", sa, first[a.ScheduleKey].ID)
	}
	if sb.ID != first[b.ScheduleKey].ID || !sb.Paused || sb.PausedBy != "alice" || !sb.NextAt.Equal(b.NextAt) {
		t.Errorf("kept b = %+v, want its row still paused by alice with its NextAt", sb)
	}
	if sc.ID == 0 || !sc.NextAt.Equal(c.NextAt) {
		t.Errorf("new c = %+v, want it added with its NextAt", sc)
	}
	if _, err := db.Schedule(ctx, first[d.ScheduleKey].ID); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("removed d: %v, want ErrNotFound", err)
	}
	listed, err := db.Schedules(ctx, repo.ID)
	if err != nil || len(listed) != 3 || listed[0].ID != sa.ID || listed[1].ID != sb.ID || listed[2].ID != sc.ID {
		t.Errorf("Schedules = %+v, %v; want a, b, c by id", listed, err)
	}
	if got, err := db.Schedule(ctx, kept.ID); err != nil || got.Repo != "alice/other" || !got.NextAt.Equal(a.NextAt) {
		t.Errorf("the other repository's schedule = %+v, %v; want it untouched", got, err)
	}
	if gone := syncSchedules(t, db, repo.ID); len(gone) != 0 {
		t.Errorf("sync of none left %+v", gone)
	}
}

// DueSchedules lists the schedules not paused whose NextAt is not after
// now, soonest first (then by id), up to the limit; NextScheduleAt is the
// earliest NextAt not paused. Pins: a paused schedule firing, or a
// replica sleeping past a due time.
func testDueSchedules_UnpausedDueByTimeThenIDUpToTheLimit(t *testing.T, open Opener) {
	db := open(t)
	ctx := context.Background()
	if _, ok, err := db.NextScheduleAt(ctx); err != nil || ok {
		t.Fatalf("NextScheduleAt with no schedules: ok %v, %v; want none", ok, err)
	}
	repo, _ := seed(t, db, 0)
	m := time.Minute
	got := syncSchedules(t, db, repo.ID, newSchedule("s1", "1", "", schedT0.Add(2*m)), newSchedule("s2", "2", "", schedT0.Add(m)),
		newSchedule("s3", "3", "", schedT0.Add(m)), newSchedule("later", "4", "", schedT0.Add(10*m)), newSchedule("paused", "5", "", schedT0))
	id := func(name, cron string) int64 {
		return got[newSchedule(name, cron, "", time.Time{}).ScheduleKey].ID
	}
	if _, err := db.PauseSchedule(ctx, id("paused", "5"), true, "alice", schedT0, time.Time{}); err != nil {
		t.Fatal(err)
	}
	due := func(limit int) []int64 {
		t.Helper()
		list, err := db.DueSchedules(ctx, schedT0.Add(5*m), limit)
		if err != nil {
			t.Fatal(err)
		}
		var ids []int64
		for _, s := range list {
			ids = append(ids, s.ID)
		}
		return ids
	}
	want := []int64{id("s2", "2"), id("s3", "3"), id("s1", "1")}
	if all := due(10); !slices.Equal(all, want) {
		t.Errorf("due = %v, want %v (s2, s3 at +1m by id, s1 at +2m; not the paused one, nor the later one)", all, want)
	}
	if two := due(2); !slices.Equal(two, want[:2]) {
		t.Errorf("due, limit 2 = %v, want %v", two, want[:2])
	}
	if at, ok, err := db.NextScheduleAt(ctx); err != nil || !ok || !at.Equal(schedT0.Add(m)) {
		t.Errorf("NextScheduleAt = %v %v %v, want %v (the paused one's earlier time does not count)", at, ok, err, schedT0.Add(m))
	}
}

// SkipSchedule moves NextAt only from the time read, recording why that
// time did not run; a stale read moves nothing. Pins: two replicas both
// skipping (or one skipping what the other fired), passing over a time.
func testSkipSchedule_MovesOnlyTheDueTimeRead(t *testing.T, open Opener) {
	db := open(t)
	ctx := context.Background()
	repo, _ := seed(t, db, 0)
	s := syncSchedules(t, db, repo.ID, newSchedule("n", "@hourly", "release", schedT0))[newSchedule("n", "@hourly", "release", schedT0).ScheduleKey]
	next := schedT0.Add(time.Hour)
	if ok, err := db.SkipSchedule(ctx, s.ID, schedT0.Add(-time.Hour), next, "stale"); err != nil || ok {
		t.Fatalf("skip of a time not read: %v, %v; want false", ok, err)
	}
	if ok, err := db.SkipSchedule(ctx, s.ID, schedT0, next, "branch release does not exist"); err != nil || !ok {
		t.Fatalf("skip of the time read: %v, %v; want true", ok, err)
	}
	if ok, err := db.SkipSchedule(ctx, s.ID, schedT0, next.Add(time.Hour), "again"); err != nil || ok {
		t.Fatalf("skip of the same time again: %v, %v; want false", ok, err)
	}
	got, err := db.Schedule(ctx, s.ID)
	if err != nil || !got.NextAt.Equal(next) || got.Problem != "branch release does not exist" || got.LastAt != nil {
		t.Errorf("after the skip: %+v, %v; want NextAt %v, the problem, no LastAt", got, err, next)
	}
	if _, err := db.SkipSchedule(ctx, 999_999, schedT0, next, ""); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("skip of no schedule: %v, want ErrNotFound", err)
	}
}

// A paused schedule is not due and cannot fire; pausing again keeps who
// paused it; resuming sets NextAt to the time given, so the times passed
// while paused never run, and resuming a schedule not paused moves
// nothing. Pins: a burst of missed runs after a resume, or a resume
// passing over a running schedule's due time.
func testPauseSchedule_APausedScheduleNeverFiresAndResumingPassesOverItsMissedTimes(t *testing.T, open Opener) {
	db := open(t)
	ctx := context.Background()
	repo, _ := seed(t, db, 0)
	key := newSchedule("n", "@hourly", "", schedT0)
	s := syncSchedules(t, db, repo.ID, key)[key.ScheduleKey]
	p, err := db.PauseSchedule(ctx, s.ID, true, "alice", schedT0.Add(time.Minute), time.Time{})
	if err != nil || !p.Paused || p.PausedBy != "alice" || p.PausedAt == nil || !p.PausedAt.Equal(schedT0.Add(time.Minute)) {
		t.Fatalf("paused: %+v, %v; want paused by alice at +1m", p, err)
	}
	if p, _ = db.PauseSchedule(ctx, s.ID, true, "bob", schedT0.Add(time.Hour), time.Time{}); p.PausedBy != "alice" {
		t.Errorf("paused again by bob: %+v, want alice's pause kept", p)
	}
	if due, _ := db.DueSchedules(ctx, schedT0.Add(24*time.Hour), 10); len(due) != 0 {
		t.Errorf("due while paused: %+v", due)
	}
	if _, err := fire(ctx, db, s, schedT0); !errors.Is(err, store.ErrConflict) {
		t.Errorf("firing a paused schedule: %v, want ErrConflict", err)
	}
	next := schedT0.Add(48 * time.Hour)
	r, err := db.PauseSchedule(ctx, s.ID, false, "bob", schedT0.Add(47*time.Hour), next)
	if err != nil || r.Paused || r.PausedBy != "" || r.PausedAt != nil || !r.NextAt.Equal(next) {
		t.Fatalf("resumed: %+v, %v; want running, NextAt %v", r, err, next)
	}
	if r, _ = db.PauseSchedule(ctx, s.ID, false, "bob", schedT0, next.Add(time.Hour)); !r.NextAt.Equal(next) {
		t.Errorf("resuming a running schedule moved NextAt to %v, want %v kept", r.NextAt, next)
	}
	if _, err := db.PauseSchedule(ctx, 999_999, true, "alice", schedT0, time.Time{}); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("pause of no schedule: %v, want ErrNotFound", err)
	}
}

// Firing moves NextAt to Next and records the pipeline and its due time,
// clearing the problem; firing the same time again (a stale Expected)
// creates nothing at all and is ErrConflict, as is firing it as another
// repository's pipeline. Pins: a due time starting two pipelines, or a
// refused fire leaving a pipeline without its schedule's record.
func testCreatePipeline_AScheduleFiresEachDueTimeOnce(t *testing.T, open Opener) {
	db := open(t)
	ctx := context.Background()
	repo, _ := seed(t, db, 0)
	other, err := db.CreateRepo(ctx, repo.OwnerID, "other", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	key := newSchedule("nightly", "0 3 * * *", "", schedT0)
	key.Problem = "branch main does not exist"
	s := syncSchedules(t, db, repo.ID, key)[key.ScheduleKey]
	wrong := s
	wrong.RepoID = other.ID
	if _, err := fire(ctx, db, wrong, schedT0); !errors.Is(err, store.ErrConflict) {
		t.Errorf("firing it as another repository's pipeline: %v, want ErrConflict", err)
	}
	p, err := fire(ctx, db, s, schedT0)
	if err != nil || p.Event != api.EventSchedule || p.Actor != api.ScheduleActor {
		t.Fatalf("fire = %+v, %v", p, err)
	}
	got, err := db.Schedule(ctx, s.ID)
	if err != nil || !got.NextAt.Equal(schedT0.Add(time.Hour)) || got.LastAt == nil || !got.LastAt.Equal(schedT0) ||
		got.LastPipelineID != p.ID || got.Problem != "" {
		t.Fatalf("after firing: %+v, %v; want NextAt +1h, LastAt %v, LastPipelineID %d, no problem", got, err, schedT0, p.ID)
	}
	pipelines, runs := countRows(t, db, "pipelines"), countRows(t, db, "runs")
	if _, err := fire(ctx, db, s, schedT0); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("firing the same time again: %v, want ErrConflict", err)
	}
	if p2, r2 := countRows(t, db, "pipelines"), countRows(t, db, "runs"); p2 != pipelines || r2 != runs {
		t.Errorf("the refused fire wrote %d pipelines and %d runs, want none", p2-pipelines, r2-runs)
	}
	if again, _ := db.Schedule(ctx, s.ID); again.LastPipelineID != p.ID || !again.NextAt.Equal(got.NextAt) {
		t.Errorf("after the refused fire: %+v, want it as the first fire left it", again)
	}
	if _, err := fire(ctx, db, s, schedT0.Add(time.Hour)); err != nil {
		t.Errorf("firing the next time: %v", err)
	}
}

// A fire whose transaction fails after moving NextAt (here: a run needing
// a run the pipeline does not have, as a replica dying mid-fire) leaves
// nothing behind: no pipeline, no run, the time still due and still
// firable. Pins: NextAt moved outside the pipeline's transaction, so a
// crash passes over the due time.
func testCreatePipeline_AFireThatDoesNotCommitLeavesItsTimeDue(t *testing.T, open Opener) {
	db := open(t)
	ctx := context.Background()
	repo, _ := seed(t, db, 0)
	key := newSchedule("nightly", "0 3 * * *", "", schedT0)
	s := syncSchedules(t, db, repo.ID, key)[key.ScheduleKey]
	pipelines, runs := countRows(t, db, "pipelines"), countRows(t, db, "runs")
	bad := []store.NewRun{{Workflow: "nightly", WorkflowPath: s.Workflow, Source: "src", State: api.StateQueued,
		Needs: []store.NewNeed{{Index: 7, Name: "none"}}}}
	if _, err := fire(ctx, db, s, schedT0, bad...); err == nil || errors.Is(err, store.ErrConflict) {
		t.Fatalf("fire of a broken pipeline: %v, want an error other than ErrConflict", err)
	}
	if p2, r2 := countRows(t, db, "pipelines"), countRows(t, db, "runs"); p2 != pipelines || r2 != runs {
		t.Errorf("the failed fire left %d pipelines and %d runs, want none", p2-pipelines, r2-runs)
	}
	if due, err := db.DueSchedules(ctx, schedT0, 10); err != nil || len(due) != 1 || !due[0].NextAt.Equal(schedT0) || due[0].LastAt != nil {
		t.Fatalf("due after the failed fire: %+v, %v; want the schedule at its time", due, err)
	}
	if _, err := fire(ctx, db, s, schedT0); err != nil {
		t.Errorf("firing it afterwards: %v", err)
	}
}

// Replicas firing the same due time at once (each read the same NextAt)
// start exactly one pipeline; every other one gets ErrConflict. Pins: the
// compare-and-set not holding under the database's concurrency (on
// PostgreSQL, two transactions both seeing the old NextAt).
func testCreatePipeline_ADueTimeStartsOnePipelineOnReplicasRacing(t *testing.T, replicas Replicas) {
	a, b := replicas(t)
	ctx := context.Background()
	repo, _ := seed(t, a, 0)
	key := newSchedule("nightly", "0 3 * * *", "", schedT0)
	s := syncSchedules(t, a, repo.ID, key)[key.ScheduleKey]
	pipelines := countRows(t, a, "pipelines")
	const n = 8
	var wg sync.WaitGroup
	start := make(chan struct{})
	won := make(chan int64, n)
	errs := make(chan error, n)
	for i := range n {
		db := [2]store.Store{a, b}[i%2]
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			p, err := fire(ctx, db, s, schedT0)
			switch {
			case err == nil:
				won <- p.ID
			case !errors.Is(err, store.ErrConflict):
				errs <- fmt.Errorf("replica %d: %w", i%2, err)
			}
		}()
	}
	close(start)
	wg.Wait()
	close(won)
	close(errs)
	for err := range errs {
		t.Errorf("a racing fire failed otherwise than ErrConflict: %v", err)
	}
	var ids []int64
	for id := range won {
		ids = append(ids, id)
	}
	if len(ids) != 1 {
		t.Fatalf("%d racing fires of one due time started pipelines %v, want exactly one", n, ids)
	}
	if got := countRows(t, a, "pipelines"); got != pipelines+1 {
		t.Errorf("%d pipelines were made, want 1", got-pipelines)
	}
	if got, _ := b.Schedule(ctx, s.ID); got.LastPipelineID != ids[0] {
		t.Errorf("the schedule records pipeline %d, want the one started, %d", got.LastPipelineID, ids[0])
	}
}

// A replica that moved a schedule's NextAt in its fire's transaction and
// died before committing (here: a raw transaction holding the row, rolled
// back) leaves the time due: another replica's fire of it, waiting on the
// row meanwhile (observed on PostgreSQL), starts its one pipeline. Pins:
// a crash mid-fire passing over the due time, or the waiting fire failing.
func testCreatePipeline_AReplicaDyingMidFireLeavesTheTimeDueForAnother(t *testing.T, replicas Replicas) {
	a, b := replicas(t)
	ctx := context.Background()
	repo, _ := seed(t, a, 0)
	key := newSchedule("nightly", "0 3 * * *", "", schedT0)
	s := syncSchedules(t, a, repo.ID, key)[key.ScheduleKey]
	pipelines := countRows(t, a, "pipelines")
	raw := a.(rawSQL).SQL()
	dying, err := raw.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := dying.ExecContext(ctx, fmt.Sprintf(`UPDATE schedules SET next_at = %d WHERE id = %d`,
		schedT0.Add(time.Hour).UnixMilli(), s.ID)); err != nil {
		dying.Rollback()
		t.Fatal(err)
	}
	type result struct {
		p   store.Pipeline
		err error
	}
	done := make(chan result, 1)
	go func() {
		p, err := fire(ctx, b, s, schedT0)
		done <- result{p, err}
	}()
	waitForLockWait(t, raw)
	if err := dying.Rollback(); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil {
		t.Fatalf("the other replica's fire after the first died: %v, want its pipeline", r.err)
	}
	got, err := a.Schedule(ctx, s.ID)
	if err != nil || got.LastPipelineID != r.p.ID || !got.NextAt.Equal(schedT0.Add(time.Hour)) {
		t.Errorf("schedule = %+v, %v; want fired by pipeline %d", got, err, r.p.ID)
	}
	if n := countRows(t, a, "pipelines"); n != pipelines+1 {
		t.Errorf("%d pipelines made, want 1", n-pipelines)
	}
}

// waitForLockWait waits until a session of PostgreSQL database raw waits
// on a lock; on a database without pg_stat_activity (SQLite: the writer
// waits on the file's lock, unseen) it returns at once.
func waitForLockWait(t *testing.T, raw *sql.DB) {
	t.Helper()
	ctx := context.Background()
	if _, err := raw.ExecContext(ctx, `SELECT 1 FROM pg_stat_activity LIMIT 1`); err != nil {
		return
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		var n int
		if err := raw.QueryRowContext(ctx, `SELECT COUNT(*) FROM pg_stat_activity
			WHERE wait_event_type = 'Lock' AND datname = current_database()`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("no session came to wait on the schedule's row in 20s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Replicas syncing one repository's schedules at once (two pushes of the
// default branch, handled on two replicas) all succeed, and the schedules
// end as one of the syncs wanted. Pins: a unique violation from two
// inserts of one new key, or a sync's remove and another's keep mixing.
func testSyncSchedules_ReplicasSyncingAtOnceAllSucceed(t *testing.T, replicas Replicas) {
	a, b := replicas(t)
	ctx := context.Background()
	repo, _ := seed(t, a, 0)
	var wants [2][]store.NewSchedule
	for i := range 6 {
		s := newSchedule(fmt.Sprint("w", i), "@daily", "", schedT0)
		if i < 4 {
			wants[0] = append(wants[0], s)
		}
		if i >= 2 {
			wants[1] = append(wants[1], s)
		}
	}
	const n = 8
	var wg sync.WaitGroup
	start := make(chan struct{})
	errs := make(chan error, n)
	for i := range n {
		db := [2]store.Store{a, b}[i%2]
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			if _, err := db.SyncSchedules(ctx, repo.ID, wants[(i/2)%2]); err != nil {
				errs <- err
			}
		}()
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("a racing sync failed: %v", err)
	}
	got, err := b.Schedules(ctx, repo.ID)
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, s := range got {
		keys = append(keys, s.Workflow)
	}
	slices.Sort(keys) // ids follow whichever sync added a key first
	w0, w1 := keysOf(wants[0]), keysOf(wants[1])
	if !slices.Equal(keys, w0) && !slices.Equal(keys, w1) {
		t.Errorf("after the racing syncs: %v, want %v or %v", keys, w0, w1)
	}
}

func keysOf(want []store.NewSchedule) []string {
	var out []string
	for _, s := range want {
		out = append(out, s.Workflow)
	}
	return out
}

// A repository's schedules go with it (no store method removes a
// repository yet: the row is deleted directly). Pins: a removed
// repository's schedules left due, firing into nothing forever.
func testSchedules_GoWithTheirRepository(t *testing.T, open Opener) {
	db := open(t)
	ctx := context.Background()
	repo, _ := seed(t, db, 0)
	gone, err := db.CreateRepo(ctx, repo.OwnerID, "gone", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	key := newSchedule("nightly", "@daily", "", schedT0)
	syncSchedules(t, db, repo.ID, key)
	s := syncSchedules(t, db, gone.ID, key)[key.ScheduleKey]
	countRows(t, db, "schedules") // skips a store without SQL
	if _, err := db.(rawSQL).SQL().ExecContext(ctx, fmt.Sprintf(`DELETE FROM repos WHERE id = %d`, gone.ID)); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Schedule(ctx, s.ID); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("the removed repository's schedule: %v, want ErrNotFound", err)
	}
	if n := countRows(t, db, "schedules"); n != 1 {
		t.Errorf("%d schedules left, want the other repository's one", n)
	}
}
