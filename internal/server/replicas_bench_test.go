package server_test

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/server"
	"knotless.dev/knotless/internal/server/servertest"
	"knotless.dev/knotless/internal/store"
	"knotless.dev/knotless/internal/store/postgres"
	"knotless.dev/knotless/internal/store/postgres/pgtest"
	"knotless.dev/knotless/internal/store/sqlite"
)

// scrapeRuns is how many runs BenchmarkMetricsScrape puts in the database.
var scrapeRuns = flag.Int("scrape-runs", 10000, "BenchmarkMetricsScrape: runs in the database")

func discardLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// backend is one database setup the benchmarks compare.
type backend struct {
	name     string
	replicas int
	postgres bool
}

var backends = []backend{{"sqlite-1", 1, false}, {"postgres-1", 1, true}, {"postgres-3", 3, true}}

// startBackend starts bk's replicas on one data directory (and one
// database) with alice/app on them.
func startBackend(b *testing.B, bk backend, seed func(dir, database string)) (*fixture, []*servertest.Server) {
	b.Helper()
	opts := servertest.Options{DataDir: b.TempDir(), Logger: discardLogger()}
	if bk.postgres {
		opts.Database = pgtest.Start(b).Database(b)
	}
	if seed != nil {
		seed(opts.DataDir, opts.Database)
	}
	s := servertest.Start(b, opts)
	f := &fixture{Server: s, token: s.CreateAccount(b, "alice"), repo: "alice/app"}
	s.CreateRepo(b, f.token, "app")
	all := []*servertest.Server{s}
	for range bk.replicas - 1 {
		all = append(all, servertest.Start(b, opts))
	}
	return f, all
}

// Claims per second: b.N runs queued by one push, claimed by 8 runners
// spread over the replicas, each claiming as fast as it can.
func BenchmarkClaims(b *testing.B) {
	for _, bk := range backends {
		b.Run(bk.name, func(b *testing.B) {
			f, replicas := startBackend(b, bk, nil)
			files := map[string]string{}
			for i := range b.N {
				files[fmt.Sprintf(".knotless/workflows/w%05d.yml", i)] = queuedWorkflow("")
			}
			var runners []*servertest.Runner
			for i := range 8 {
				runners = append(runners, replicas[i%len(replicas)].RegisterRunner(b, f.repo, fmt.Sprint("r", i), nil, true))
			}
			f.Push(b, f.repo, f.token, files, "main")
			var claimed atomic.Int64
			b.ResetTimer()
			start := time.Now()
			var wg sync.WaitGroup
			for _, r := range runners {
				wg.Go(func() {
					for claimed.Load() < int64(b.N) {
						var out api.ClaimOutput
						if err := r.Client.Procedure(context.Background(), api.MethodClaim, api.ClaimInput{}, &out); err != nil {
							b.Error(err)
							return
						}
						if out.Run != nil {
							claimed.Add(1)
						}
					}
				})
			}
			wg.Wait()
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "claims/s")
		})
	}
}

// Push → first step running: a runner long-polls a claim on the last
// replica; each op pushes a commit through the first, and ends when the
// runner has claimed the run and reported its first step running.
func BenchmarkPushToFirstStep(b *testing.B) {
	for _, bk := range backends {
		b.Run(bk.name, func(b *testing.B) {
			f, replicas := startBackend(b, bk, nil)
			r := replicas[len(replicas)-1].RegisterRunner(b, f.repo, "r1", nil, true)
			dir := servertest.WorkTree(b, map[string]string{".knotless/workflows/any.yml": queuedWorkflow("")})
			b.ResetTimer()
			var total time.Duration
			for i := range b.N {
				got := make(chan *api.ClaimedRun, 1)
				go func() {
					var out api.ClaimOutput
					_ = r.Client.Procedure(context.Background(), api.MethodClaim, api.ClaimInput{Wait: 30}, &out)
					got <- out.Run
				}()
				b.StopTimer()
				for replicas[len(replicas)-1].ClaimStats().Waiting == 0 {
					time.Sleep(time.Millisecond) // polling: the claim waits before the push
				}
				servertest.Commit(b, dir, map[string]string{"n": fmt.Sprint(i)}, "next")
				b.StartTimer()
				start := time.Now()
				f.PushDir(b, dir, f.repo, f.token, "main")
				c := <-got
				if c == nil {
					b.Fatal("the waiting claim got no run")
				}
				now := time.Now()
				if err := r.Client.Procedure(context.Background(), api.MethodUpdateStep,
					api.UpdateStepInput{Run: c.Run.ID, Step: 1, State: api.StepRunning, At: &now}, nil); err != nil {
					b.Fatal(err)
				}
				total += time.Since(start)
			}
			b.ReportMetric(float64(total.Milliseconds())/float64(b.N), "ms/push")
		})
	}
}

// The scrape time of /metrics with -scrape-runs runs in the database
// (most final, some queued), on SQLite and on PostgreSQL.
func BenchmarkMetricsScrape(b *testing.B) {
	for _, bk := range backends[:2] {
		b.Run(fmt.Sprintf("%s-%druns", bk.name, *scrapeRuns), func(b *testing.B) {
			f, _ := startBackend(b, bk, func(dir, database string) { seedRuns(b, dir, database, *scrapeRuns) })
			b.ResetTimer()
			for range b.N {
				resp, err := http.Get(f.URL + server.MetricsPath)
				if err != nil {
					b.Fatal(err)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					b.Fatal(resp.Status)
				}
			}
		})
	}
}

// seedRuns writes n runs of a repository seed/app straight into the
// database, in pipelines of 100: nine in ten ended (succeeded, failed,
// errored), the rest queued.
func seedRuns(b *testing.B, dir, database string, n int) {
	b.Helper()
	ctx := context.Background()
	var db store.Store
	var err error
	if database != "" {
		db, err = postgres.Open(ctx, database)
	} else {
		db, err = sqlite.Open(ctx, dir+"/"+server.DBFile)
	}
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	a, err := db.CreateAccount(ctx, store.Account{Handle: "seed", DID: "did:key:seed"}, "seed-token")
	if err != nil {
		b.Fatal(err)
	}
	repo, err := db.CreateRepo(ctx, a.ID, "app", time.Now())
	if err != nil {
		b.Fatal(err)
	}
	states := []string{api.StateSucceeded, api.StateFailed, api.StateErrored, api.StateSucceeded, api.StateSucceeded,
		api.StateSucceeded, api.StateFailed, api.StateSucceeded, api.StateSucceeded, api.StateQueued}
	for made := 0; made < n; {
		np := store.NewPipeline{RepoID: repo.ID, Ref: "refs/heads/main", SHA: "abc", Event: "push"}
		for i := 0; i < 100 && made < n; i++ {
			st := states[made%len(states)]
			reason := map[string]string{api.StateFailed: api.ReasonExitCode, api.StateErrored: api.ReasonRunnerLost}[st]
			np.Runs = append(np.Runs, store.NewRun{Workflow: "w", WorkflowPath: ".knotless/workflows/w.yml", Source: "src",
				State: st, Reason: reason})
			made++
		}
		if _, _, err := db.CreatePipeline(ctx, np); err != nil {
			b.Fatal(err)
		}
	}
}
