package storetest

import (
	"context"
	"slices"
	"testing"
	"time"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/store"
)

// The retention tests join the suite from here (issue 36), so that the
// suite's list in storetest.go stays as it was.
func init() {
	tests = append(tests,
		struct {
			name string
			fn   func(*testing.T, Opener)
		}{"ExpiryCandidates_EveryRuleSetMustLetARunGoAndRunningRunsNever", testExpiryCandidates_EveryRuleSetMustLetARunGoAndRunningRunsNever},
		struct {
			name string
			fn   func(*testing.T, Opener)
		}{"RepoUsage_SumsKeptBytesCountsExpiredAndKeepsTheLatestCacheReport", testRepoUsage_SumsKeptBytesCountsExpiredAndKeepsTheLatestCacheReport},
	)
}

// endedPipeline creates a pipeline of ref with one run ended (failed) at
// at, and returns the run's id.
func endedPipeline(t *testing.T, db store.Store, repo store.Repo, ref string, at time.Time) int64 {
	t.Helper()
	_, runs, err := db.CreatePipeline(context.Background(), store.NewPipeline{RepoID: repo.ID, Ref: ref, SHA: "abc", Event: "push",
		CreatedAt: at, Runs: []store.NewRun{{Workflow: "w", WorkflowPath: ".knotless/workflows/w.yml", Source: "src",
			State: api.StateFailed, Reason: api.ReasonWorkflowInvalid}}})
	if err != nil {
		t.Fatal(err)
	}
	return runs[0].ID
}

// measureAll records bytes for every run that ended before now.
func measureAll(t *testing.T, db store.Store, now time.Time) []int64 {
	t.Helper()
	ids, err := db.UnmeasuredRuns(context.Background(), time.Time{}, now, 100)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		if err := db.RecordRunBytes(context.Background(), store.RunBytes{RunID: id, LogsBytes: 100, Logs: 2, OutputsBytes: 10, MeasuredAt: now}); err != nil {
			t.Fatal(err)
		}
	}
	return ids
}

// A run's bytes go only when every rule set (the repository's own over
// the server's) lets them go, only once measured, never while the run has
// not ended, and not within the grace after its end. Pins: a policy of
// days and pipelines removing the last pipeline of a quiet branch, or a
// running run's log being removed under its writer.
func testExpiryCandidates_EveryRuleSetMustLetARunGoAndRunningRunsNever(t *testing.T, open Opener) {
	db := open(t)
	ctx := context.Background()
	repo, queued := seed(t, db, 1) // a queued run of an old pipeline
	now := time.Now().UTC().Truncate(time.Millisecond)
	day := 24 * time.Hour
	main10 := endedPipeline(t, db, repo, "refs/heads/main", now.Add(-10*day))
	main5 := endedPipeline(t, db, repo, "refs/heads/main", now.Add(-5*day))
	main2 := endedPipeline(t, db, repo, "refs/heads/main", now.Add(-2*day))
	mainNew := endedPipeline(t, db, repo, "refs/heads/main", now.Add(-time.Hour))
	dev10 := endedPipeline(t, db, repo, "refs/heads/dev", now.Add(-10*day))
	if got := measureAll(t, db, now); !slices.Contains(got, main10) || slices.Contains(got, queued[0].ID) {
		t.Fatalf("UnmeasuredRuns = %v: want the ended runs, never queued run %d", got, queued[0].ID)
	}
	if more := measureAll(t, db, now); len(more) != 0 {
		t.Fatalf("measured runs listed again: %v", more)
	}
	later := endedPipeline(t, db, repo, "refs/heads/later", now.Add(time.Minute))
	if ids, err := db.UnmeasuredRuns(ctx, now, now.Add(time.Hour), 10); err != nil || !slices.Equal(ids, []int64{later}) {
		t.Fatalf("UnmeasuredRuns in [now, now+1h) = %v, %v; want only run %d", ids, err, later)
	}
	if ids, err := db.UnmeasuredRuns(ctx, now.Add(2*time.Minute), now.Add(time.Hour), 10); err != nil || len(ids) != 0 {
		t.Fatalf("UnmeasuredRuns after it = %v, %v; want none", ids, err)
	}
	cands := func(p store.RetentionPolicy, grace time.Duration) []int64 {
		t.Helper()
		ids, err := db.ExpiryCandidates(ctx, store.ExpiryQuery{Server: p, Now: now, EndedBefore: now.Add(-grace), Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		return ids
	}
	for _, c := range []struct {
		name  string
		p     store.RetentionPolicy
		grace time.Duration
		want  []int64
	}{
		{"nothing set", store.RetentionPolicy{}, 0, nil},
		{"3 days", store.RetentionPolicy{KeepLogsDays: 3}, 0, []int64{main10, dev10, main5}}, // by end, then id
		{"2 pipelines a branch", store.RetentionPolicy{KeepPipelines: 2}, 0, []int64{main10, main5}},
		{"7 days and 2 pipelines", store.RetentionPolicy{KeepLogsDays: 7, KeepPipelines: 2}, 0, []int64{main10}},
		{"1 pipeline", store.RetentionPolicy{KeepPipelines: 1}, 0, []int64{main10, main5, main2}},
		{"1 pipeline, a grace of 3 days", store.RetentionPolicy{KeepPipelines: 1}, 3 * day, []int64{main10, main5}},
	} {
		if got := cands(c.p, c.grace); !slices.Equal(got, c.want) {
			t.Errorf("%s: candidates %v, want %v (main %d %d %d %d, dev %d)", c.name, got, c.want, main10, main5, main2, mainNew, dev10)
		}
	}
	forever, one := 0, 1
	if err := db.SetRepoRetention(ctx, store.RepoRetention{RepoID: repo.ID, KeepLogsDays: &forever, SetBy: "alice", SetAt: now}); err != nil {
		t.Fatal(err)
	}
	if got := cands(store.RetentionPolicy{KeepLogsDays: 3}, 0); len(got) != 0 {
		t.Errorf("the repository keeps forever over the server's 3 days: candidates %v", got)
	}
	if err := db.SetRepoRetention(ctx, store.RepoRetention{RepoID: repo.ID, KeepPipelines: &one, SetBy: "alice", SetAt: now}); err != nil {
		t.Fatal(err)
	}
	if got := cands(store.RetentionPolicy{KeepLogsDays: 3}, 0); !slices.Equal(got, []int64{main10, main5}) {
		t.Errorf("the repository's 1 pipeline with the server's 3 days: candidates %v, want %v", got, []int64{main10, main5})
	}
	rr, err := db.RepoRetention(ctx, repo.ID)
	if err != nil || rr.KeepLogsDays != nil || rr.KeepPipelines == nil || *rr.KeepPipelines != 1 || rr.SetBy != "alice" {
		t.Fatalf("RepoRetention = %+v, %v", rr, err)
	}
	if ok, err := db.MarkRunExpired(ctx, main10, now); !ok || err != nil {
		t.Fatalf("MarkRunExpired = %v, %v", ok, err)
	}
	if ok, err := db.MarkRunExpired(ctx, main10, now.Add(time.Minute)); ok || err != nil {
		t.Fatalf("MarkRunExpired again = %v, %v; want false (done already)", ok, err)
	}
	if at, err := db.RunExpiredAt(ctx, main10); err != nil || at == nil || !at.Equal(now) {
		t.Fatalf("RunExpiredAt = %v, %v; want %v (the first time)", at, err, now)
	}
	if at, err := db.RunExpiredAt(ctx, main5); err != nil || at != nil {
		t.Fatalf("RunExpiredAt of a kept run = %v, %v", at, err)
	}
	if got := cands(store.RetentionPolicy{KeepLogsDays: 3}, 0); !slices.Equal(got, []int64{main5}) {
		t.Errorf("after expiring %d: candidates %v, want [%d]", main10, got, main5)
	}
}

// RepoUsage sums the measured bytes still kept, counts what expired, lists
// the runs not measured yet, and keeps each cache store's latest report
// (an older report arriving late changes nothing).
func testRepoUsage_SumsKeptBytesCountsExpiredAndKeepsTheLatestCacheReport(t *testing.T, open Opener) {
	db := open(t)
	ctx := context.Background()
	repo, queued := seed(t, db, 1)
	now := time.Now().UTC().Truncate(time.Millisecond)
	a := endedPipeline(t, db, repo, "refs/heads/main", now.Add(-time.Hour))
	b := endedPipeline(t, db, repo, "refs/heads/main", now.Add(-time.Minute))
	c := endedPipeline(t, db, repo, "refs/heads/main", now)
	for _, id := range []int64{a, b} {
		if err := db.RecordRunBytes(ctx, store.RunBytes{RunID: id, LogsBytes: 100, Logs: 2, OutputsBytes: 7, MeasuredAt: now}); err != nil {
			t.Fatal(err)
		}
		if err := db.PutOutputs(ctx, store.Outputs{RunID: id, Size: 7, SHA256: "aa", StoredAt: now}, nil); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := db.MarkRunExpired(ctx, a, now); err != nil {
		t.Fatal(err)
	}
	for _, u := range []store.CacheUsage{
		{RepoID: repo.ID, Store: "s3: minio/knotless", Entries: 3, Bytes: 300, ReportedAt: now},
		{RepoID: repo.ID, Store: "s3: minio/knotless", Entries: 1, Bytes: 100, ReportedAt: now.Add(-time.Minute)}, // late
		{RepoID: repo.ID, Store: "runner r1: disk", Entries: 2, Bytes: 20, ReportedAt: now},
	} {
		if err := db.PutCacheUsage(ctx, u); err != nil {
			t.Fatal(err)
		}
	}
	u, err := db.RepoUsage(ctx, repo.ID, 10)
	if err != nil {
		t.Fatal(err)
	}
	if u.LogsBytes != 100 || u.Logs != 2 || u.OutputsBytes != 7 || u.Outputs != 1 || u.ExpiredRuns != 1 || u.ExpiredBytes != 107 ||
		u.LastExpiredAt == nil || !u.LastExpiredAt.Equal(now) {
		t.Errorf("usage %+v: want logs 100 B in 2, outputs 7 B in 1, 1 run expired with 107 B", u)
	}
	if !slices.Equal(u.Unmeasured, []int64{c}) || u.UnmeasuredMore || slices.Contains(u.Unmeasured, queued[0].ID) {
		t.Errorf("unmeasured %v (more %v), want [%d]", u.Unmeasured, u.UnmeasuredMore, c)
	}
	want := []store.CacheUsage{
		{RepoID: repo.ID, Store: "runner r1: disk", Entries: 2, Bytes: 20, ReportedAt: now},
		{RepoID: repo.ID, Store: "s3: minio/knotless", Entries: 3, Bytes: 300, ReportedAt: now},
	}
	if !slices.Equal(u.Caches, want) {
		t.Errorf("caches %+v, want %+v", u.Caches, want)
	}
}
