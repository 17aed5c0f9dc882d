package server_test

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/server"
	"knotless.dev/knotless/internal/server/servertest"
	"knotless.dev/knotless/internal/svcauth"
)

// logSink keeps the server's log to measure it.
type logSink struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logSink) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logSink) size() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Len()
}

func (l *logSink) lines() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Split(strings.TrimSpace(l.buf.String()), "\n")
}

// dbBytes is the data the server's SQLite database holds, in bytes: its
// pages in use (PRAGMA page_count less freelist_count, times page_size)
// as a reader sees them, the write-ahead log's newer pages included. The
// files' sizes are no measure: the WAL file keeps its size after a
// checkpoint has copied its pages into the database file, so their sum
// counts those pages twice or not, depending on when SQLite checkpointed
// (a run of this test once read +4196 KB that way).
func dbBytes(t *testing.T, dataDir string) int64 {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+filepath.Join(dataDir, server.DBFile)+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var pages, free, size int64
	for q, v := range map[string]*int64{"page_count": &pages, "freelist_count": &free, "page_size": &size} {
		if err := db.QueryRow("PRAGMA " + q).Scan(v); err != nil {
			t.Fatalf("PRAGMA %s: %v", q, err)
		}
	}
	return (pages - free) * size
}

// register registers a fresh key as runner name of repo with labels.
func register(t *testing.T, f *fixture, name string, labels []string) error {
	t.Helper()
	key, did := freshKey(t)
	signer := &svcauth.Signer{DID: did, Audience: f.DID(), Key: key}
	c := &api.Client{BaseURL: f.URL, Auth: servertest.RegistrationAuth(signer.AuthFunc(), f.AdminToken)}
	return c.Procedure(context.Background(), api.MethodRegisterRunner, api.RegisterRunnerInput{Repo: f.repo, Name: name, Labels: labels}, nil)
}

func labelsOf(n int, prefix string) []string {
	ls := make([]string, n)
	for i := range ls {
		ls[i] = fmt.Sprintf("%s%0*d", prefix, 63-len(prefix), i)
	}
	return ls
}

// Issue 14, item 5: registrations with 15,000 labels of 63 characters grew
// the database by 154 MB and the log by 960 KB per 150 calls; afterwards
// the owner's run list and runner list took seconds.
func TestServer_RegistrationsStayBoundedAndListsStayCheap(t *testing.T) {
	logs := &logSink{}
	f := newFixture(t, servertest.Options{Logger: slog.New(slog.NewTextHandler(logs, nil))})
	ctx := context.Background()
	queueOne(t, f, "runners: [gpu]\n") // a run whose "waiting for" message reads the runners
	db0, log0 := dbBytes(t, f.DataDir), logs.size()

	// The registration, from strangers: refused whole.
	huge := labelsOf(15000, "l")
	for i := range 10 {
		err := register(t, f, fmt.Sprintf("huge%d", i), huge)
		// Its body (~1 MB) is past the registration body's cap already.
		if !api.IsError(err, api.ErrInvalidRequest) {
			t.Fatalf("registration with 15,000 labels: err = %v, want InvalidRequest", err)
		}
	}
	if err := register(t, f, "over", labelsOf(server.DefaultMaxRunnerLabels+1, "l")); !api.IsError(err, api.ErrInvalidRequest) ||
		!strings.Contains(err.Error(), "--max-runner-labels") {
		t.Errorf("%d labels: err = %v, want InvalidRequest naming --max-runner-labels", server.DefaultMaxRunnerLabels+1, err)
	}
	if err := register(t, f, "long-name-"+strings.Repeat("n", 100), nil); !api.IsError(err, api.ErrInvalidRequest) {
		t.Errorf("a 110-character name: err = %v, want InvalidRequest", err)
	}

	// 150 registrations at the label limit: the repository's queue of
	// runners awaiting approval fills, then registrations are refused
	// until an owner approves or removes some.
	max := labelsOf(server.DefaultMaxRunnerLabels, "l")
	var ok, full int
	for i := range 150 {
		err := register(t, f, fmt.Sprintf("s%03d", i), max)
		switch {
		case err == nil:
			ok++
		case api.IsError(err, api.ErrTooManyPending):
			full++
			if i == 149 && !strings.Contains(err.Error(), "knotless runner list --repo "+f.repo) {
				t.Errorf("pending limit message does not say what to do: %v", err)
			}
		default:
			t.Fatalf("registration %d: %v", i, err)
		}
	}
	if ok != server.DefaultMaxPendingRunners || full != 150-server.DefaultMaxPendingRunners {
		t.Errorf("%d registered, %d refused; want %d and %d", ok, full, server.DefaultMaxPendingRunners, 150-server.DefaultMaxPendingRunners)
	}
	dbGrew, logGrew := dbBytes(t, f.DataDir)-db0, logs.size()-log0
	t.Logf("after 10 huge and 150 full registrations: database +%d KB, log +%d bytes", dbGrew>>10, logGrew)
	if dbGrew > 4<<20 {
		t.Errorf("database grew by %d KB, want under 4 MB", dbGrew>>10)
	}
	if logGrew > 100*1024 {
		t.Errorf("log grew by %d bytes, want under 100 KB (one short line per registered runner)", logGrew)
	}
	for _, l := range logs.lines() {
		if len(l) > 2048 {
			t.Errorf("a log line of %d bytes: %.200s...", len(l), l)
		}
	}

	// The owner's lists stay quick, four at once too.
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(2)
		go func() {
			defer wg.Done()
			start := time.Now()
			var out api.ListRunsOutput
			if err := f.alice().Query(ctx, api.MethodListRuns, url.Values{"repo": {f.repo}}, &out); err != nil || len(out.Runs) != 1 {
				t.Errorf("run list: %d runs, %v", len(out.Runs), err)
			}
			if d := time.Since(start); d > time.Second {
				t.Errorf("run list took %s, want under 1 s", d)
			}
		}()
		go func() {
			defer wg.Done()
			start := time.Now()
			var out api.ListRunnersOutput
			if err := f.alice().Query(ctx, api.MethodListRunners, url.Values{"repo": {f.repo}}, &out); err != nil || len(out.Runners) != 100 {
				t.Errorf("runner list: %d runners, %v", len(out.Runners), err)
			}
			if d := time.Since(start); d > time.Second {
				t.Errorf("runner list took %s, want under 1 s", d)
			}
		}()
	}
	wg.Wait()

	// Pages: every runner once, by cursor; a page over the cap is refused.
	seen := map[string]bool{}
	cursor := ""
	for pages := 0; ; pages++ {
		if pages > 10 {
			t.Fatal("runner pages do not end")
		}
		var out api.ListRunnersOutput
		p := url.Values{"repo": {f.repo}, "limit": {"30"}}
		if cursor != "" {
			p.Set("cursor", cursor)
		}
		if err := f.alice().Query(ctx, api.MethodListRunners, p, &out); err != nil {
			t.Fatal(err)
		}
		for _, x := range out.Runners {
			if seen[x.Name] {
				t.Errorf("runner %s on two pages", x.Name)
			}
			seen[x.Name] = true
		}
		if out.Cursor == "" {
			break
		}
		cursor = out.Cursor
	}
	if len(seen) != server.DefaultMaxPendingRunners {
		t.Errorf("pages held %d runners, want %d", len(seen), server.DefaultMaxPendingRunners)
	}
	err := f.alice().Query(ctx, api.MethodListRunners, url.Values{"repo": {f.repo}, "limit": {fmt.Sprint(server.DefaultMaxListPage + 1)}}, nil)
	if !api.IsError(err, api.ErrInvalidRequest) || !strings.Contains(err.Error(), "cursor") {
		t.Errorf("a page over --max-list-page: err = %v, want InvalidRequest saying to use the cursor", err)
	}

	// Once the owner removes one, a registration fits again.
	if err := f.alice().Procedure(ctx, api.MethodRemoveRunner, api.RunnerRef{Repo: f.repo, Name: "s000"}, nil); err != nil {
		t.Fatal(err)
	}
	if err := register(t, f, "wanted", []string{"gpu"}); err != nil {
		t.Errorf("registration after a removal: %v", err)
	}
}

func TestServer_RunListPagesByCursor(t *testing.T) {
	t.Parallel()
	f := newFixture(t, servertest.Options{})
	ctx := context.Background()
	queueOne(t, f, "")
	for range 2 {
		if err := f.alice().Procedure(ctx, api.MethodTriggerRun, api.TriggerInput{Repo: f.repo}, nil); err != nil {
			t.Fatal(err)
		}
	}
	var ids []int64
	cursor := ""
	for pages := 0; ; pages++ {
		if pages > 5 {
			t.Fatal("run pages do not end")
		}
		p := url.Values{"repo": {f.repo}, "limit": {"1"}}
		if cursor != "" {
			p.Set("cursor", cursor)
		}
		var out api.ListRunsOutput
		if err := f.alice().Query(ctx, api.MethodListRuns, p, &out); err != nil {
			t.Fatal(err)
		}
		for _, r := range out.Runs {
			ids = append(ids, r.ID)
		}
		if out.Cursor == "" {
			break
		}
		cursor = out.Cursor
	}
	if len(ids) != 3 || ids[0] <= ids[1] || ids[1] <= ids[2] {
		t.Errorf("runs by page = %v, want 3 runs newest first", ids)
	}
}
