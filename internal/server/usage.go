package server

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/store"
)

// What a repository uses (dev.knotless.repo.usage) and its own retention
// (dev.knotless.repo.setRetention), and the cache reports runners send
// with each run's completion.
//
// Bytes are counted cheaply: the retention sweep measures each run once,
// after it ended and its grace passed (a stat of its logs' files, the
// outputs' stored size), into the database, which sums them per
// repository. Only the runs not measured yet (running, or within the
// grace: few) are measured on demand, at most usageOnDemand of them.

// usageOnDemand bounds the runs a usage answer measures itself.
const usageOnDemand = 200

// Bounds of a retention rule a repository may set.
const (
	maxKeepLogsDays  = 100 * 365
	maxKeepPipelines = 1 << 20
)

func (s *Server) repoUsage(w http.ResponseWriter, r *http.Request, a store.Account) error {
	ctx := r.Context()
	repo, err := s.managedRepo(ctx, a, r.URL.Query().Get("repo"))
	if err != nil {
		return err
	}
	u, err := s.store.RepoUsage(ctx, repo.ID, usageOnDemand)
	if err != nil {
		return err
	}
	out := api.RepoUsage{Repo: repo.FullName(), Partial: u.UnmeasuredMore,
		Logs:    api.UsageCount{Bytes: u.LogsBytes, Count: u.Logs},
		Outputs: api.UsageCount{Bytes: u.OutputsBytes, Count: u.Outputs},
		Expired: api.ExpiredUsage{Runs: u.ExpiredRuns, Bytes: u.ExpiredBytes, LastAt: u.LastExpiredAt},
		Caches:  []api.CacheStoreUsage{}}
	for _, id := range u.Unmeasured {
		b, err := s.measureRun(ctx, id)
		if err != nil {
			return err
		}
		out.Logs.Bytes += b.LogsBytes
		out.Logs.Count += int64(b.Logs)
	}
	for _, c := range u.Caches {
		out.Caches = append(out.Caches, api.CacheStoreUsage{CacheUsage: api.CacheUsage{Store: c.Store, Entries: c.Entries, Bytes: c.Bytes},
			ReportedAt: c.ReportedAt})
	}
	if out.Retention, err = s.repoRetention(ctx, repo); err != nil {
		return err
	}
	return writeJSON(w, out)
}

// repoRetention is repo's retention as the API shows it.
func (s *Server) repoRetention(ctx context.Context, repo store.Repo) (api.Retention, error) {
	own, err := s.store.RepoRetention(ctx, repo.ID)
	if err != nil {
		return api.Retention{}, err
	}
	server := s.retention().Policy()
	eff := own.Apply(server)
	out := api.Retention{Repo: repo.FullName(), SetBy: own.SetBy,
		Effective: api.RetentionRules{KeepLogsDays: eff.KeepLogsDays, KeepPipelines: eff.KeepPipelines},
		Server:    api.RetentionRules{KeepLogsDays: server.KeepLogsDays, KeepPipelines: server.KeepPipelines},
		Own:       api.OwnRetention{KeepLogsDays: own.KeepLogsDays, KeepPipelines: own.KeepPipelines}}
	if own.SetBy != "" {
		at := own.SetAt
		out.SetAt = &at
	}
	return out, nil
}

func (s *Server) setRetention(w http.ResponseWriter, r *http.Request, a store.Account) error {
	ctx := r.Context()
	var in api.SetRetentionInput
	if err := decodeInput(r, &in); err != nil {
		return err
	}
	if err := checkRule("keepLogsDays", in.KeepLogsDays, maxKeepLogsDays); err != nil {
		return err
	}
	if err := checkRule("keepPipelines", in.KeepPipelines, maxKeepPipelines); err != nil {
		return err
	}
	repo, err := s.managedRepo(ctx, a, in.Repo)
	if err != nil {
		return err
	}
	own, err := s.store.RepoRetention(ctx, repo.ID)
	if err != nil {
		return err
	}
	own.KeepLogsDays = setRule(own.KeepLogsDays, in.KeepLogsDays)
	own.KeepPipelines = setRule(own.KeepPipelines, in.KeepPipelines)
	server := s.retention().Policy()
	if !a.Admin {
		eff := own.Apply(server)
		if keepsMore(eff.KeepLogsDays, server.KeepLogsDays) {
			return forbidden("only an admin may keep runs' logs longer than this server's %s (knotless-server --keep-logs-days)", days(server.KeepLogsDays))
		}
		if keepsMore(eff.KeepPipelines, server.KeepPipelines) {
			return forbidden("only an admin may keep more pipelines of a branch than this server's %d (knotless-server --keep-pipelines)", server.KeepPipelines)
		}
	}
	own.SetBy, own.SetAt = a.Handle, s.now()
	if err := s.store.SetRepoRetention(ctx, own); err != nil {
		return err
	}
	out, err := s.repoRetention(ctx, repo)
	if err != nil {
		return err
	}
	s.log.Info("repository retention set", "repo", repo.FullName(), "by", a.Handle,
		"keep_logs_days", out.Effective.KeepLogsDays, "keep_pipelines", out.Effective.KeepPipelines)
	return writeJSON(w, out)
}

// checkRule refuses a rule outside -1..max.
func checkRule(name string, v *int, max int) error {
	if v != nil && (*v < -1 || *v > max) {
		return badRequest("%s %d: want 0 (keep all by this rule), 1..%d, or -1 (the server's setting)", name, *v, max)
	}
	return nil
}

// setRule applies a SetRetentionInput rule to the repository's own: nil
// leaves it, -1 clears it (the server's), else sets it.
func setRule(own, in *int) *int {
	switch {
	case in == nil:
		return own
	case *in < 0:
		return nil
	}
	v := *in
	return &v
}

// keepsMore reports whether rule value v keeps more than the server's
// (0 keeps everything by the rule).
func keepsMore(v, server int) bool {
	return server > 0 && (v == 0 || v > server)
}

func days(n int) string {
	if n == 1 {
		return "1 day"
	}
	return fmt.Sprintf("%d days", n)
}

// maxCacheStore bounds a cache store's name as a runner reports it.
const maxCacheStore = 200

// recordCacheUsage keeps a runner's report of run's repository's caches
// (api.CompleteInput.Caches; nil: none). Best effort: a report that
// cannot be kept is logged, never a reason to refuse the completion.
func (s *Server) recordCacheUsage(ctx context.Context, run store.Run, u *api.CacheUsage) {
	if u == nil || u.Store == "" || u.Entries < 0 || u.Bytes < 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	err := s.store.PutCacheUsage(ctx, store.CacheUsage{RepoID: run.RepoID, Store: cut(u.Store, maxCacheStore),
		Entries: u.Entries, Bytes: u.Bytes, ReportedAt: s.now()})
	if err != nil {
		s.log.Warn("record a repository's cache usage", "run", run.ID, "repo", run.Repo, "err", err)
	}
}
