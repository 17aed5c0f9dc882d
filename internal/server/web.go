package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/store"
	"knotless.dev/knotless/internal/web"
)

// The web pages (internal/web) read and act through webBackend: every
// method answers as the XRPC method it mirrors does, by calling that very
// handler (callAs) or the same authorization functions (visibleRun,
// managedRepo), never a copy of their rules.

// webSessionLifetime is how long a browser stays signed in at most (its
// token's revocation or expiry ends it sooner).
const webSessionLifetime = 7 * 24 * time.Hour

// webSessionPrefix marks session ids (the cookie's value).
const webSessionPrefix = "kns_"

type webBackend struct{ s *Server }

var _ web.Backend = webBackend{}

func viewerAccount(v web.Viewer) store.Account {
	return store.Account{ID: v.AccountID, Handle: v.Handle, Admin: v.Admin}
}

func viewerOf(a store.Account) web.Viewer {
	return web.Viewer{AccountID: a.ID, Handle: a.Handle, Admin: a.Admin}
}

// recorder is the http.ResponseWriter callAs hands an XRPC handler.
type recorder struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (r *recorder) Header() http.Header { return r.header }
func (r *recorder) WriteHeader(code int) {
	if r.status == 0 {
		r.status = code
	}
}
func (r *recorder) Write(p []byte) (int, error) {
	r.WriteHeader(http.StatusOK)
	return r.body.Write(p)
}

// callAs calls the XRPC method nsid as account a, in process: q are its
// query parameters, in (when not nil) its JSON body, out receives its JSON
// answer. An error answer is returned as *api.Error.
func (s *Server) callAs(ctx context.Context, a store.Account, nsid string, q url.Values, in, out any) error {
	m, ok := s.methods()[nsid]
	if !ok || m.auth != authUser {
		return fmt.Errorf("callAs %s: not an account method", nsid)
	}
	body := io.Reader(http.NoBody)
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, m.verb, "/xrpc/"+nsid+"?"+q.Encode(), body)
	if err != nil {
		return err
	}
	rec := &recorder{header: http.Header{}}
	if err := m.user(rec, req, a); err != nil {
		return err
	}
	if rec.status >= 300 {
		e := &api.Error{}
		_ = json.Unmarshal(rec.body.Bytes(), e)
		e.Status = rec.status
		return e
	}
	if out == nil {
		return nil
	}
	return json.Unmarshal(rec.body.Bytes(), out)
}

func (b webBackend) SignIn(ctx context.Context, token string) (web.Session, error) {
	s := b.s
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "/", nil)
	if err != nil {
		return web.Session{}, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	a, err := s.authUser(req) // the API's own rules for a token
	if err != nil {
		return web.Session{}, err
	}
	id, err := newToken(webSessionPrefix)
	if err != nil {
		return web.Session{}, err
	}
	csrf, err := newToken("")
	if err != nil {
		return web.Session{}, err
	}
	now := s.now()
	ws := store.WebSession{IDHash: hashToken(id), TokenHash: hashToken(token), CSRF: csrf, CreatedAt: now,
		ExpiresAt: now.Add(webSessionLifetime)}
	if err := s.store.CreateWebSession(ctx, ws); err != nil {
		return web.Session{}, err
	}
	s.log.Info("web session started", "account", a.Handle)
	return web.Session{ID: id, CSRF: csrf, Viewer: viewerOf(a), ExpiresAt: ws.ExpiresAt}, nil
}

func (b webBackend) Session(ctx context.Context, id string) (web.Session, error) {
	s := b.s
	noSession := xerr(http.StatusUnauthorized, api.ErrAuthRequired, "sign in again")
	if !strings.HasPrefix(id, webSessionPrefix) || len(id) > 100 {
		return web.Session{}, noSession
	}
	ws, err := s.store.WebSession(ctx, hashToken(id), s.now())
	if errors.Is(err, store.ErrNotFound) {
		return web.Session{}, noSession
	}
	if err != nil {
		return web.Session{}, err
	}
	a, err := s.accountByTokenHash(ctx, ws.TokenHash)
	if err != nil {
		var e *api.Error
		if errors.As(err, &e) && e.Status == http.StatusUnauthorized {
			_ = s.store.DeleteWebSession(ctx, ws.IDHash)
		}
		return web.Session{}, err
	}
	return web.Session{ID: id, CSRF: ws.CSRF, Viewer: viewerOf(a), ExpiresAt: ws.ExpiresAt}, nil
}

func (b webBackend) SignOut(ctx context.Context, id string) error {
	return b.s.store.DeleteWebSession(ctx, hashToken(id))
}

func (b webBackend) Repos(ctx context.Context, v web.Viewer) ([]api.Repo, error) {
	var out api.ListReposOutput
	err := b.s.callAs(ctx, viewerAccount(v), api.MethodListRepos, nil, nil, &out)
	return out.Repos, err
}

func (b webBackend) Pipelines(ctx context.Context, v web.Viewer, full string, q web.PipelineQuery) (web.PipelinePage, error) {
	s := b.s
	a := viewerAccount(v)
	repo, err := s.managedRepo(ctx, a, full)
	if err != nil {
		return web.PipelinePage{}, err
	}
	f := store.PipelineFilter{RepoID: repo.ID, Before: q.Before, Limit: q.Limit, SHA: q.Commit, State: q.State, Workflow: q.Workflow}
	if q.Branch != "" {
		f.Ref = q.Branch
		if !strings.HasPrefix(f.Ref, "refs/") {
			f.Ref = "refs/heads/" + q.Branch
		}
	}
	ps, err := s.store.ListPipelines(ctx, f)
	if err != nil {
		return web.PipelinePage{}, err
	}
	dir, err := s.repoDir(repo.Owner, repo.Name)
	if err != nil {
		return web.PipelinePage{}, err
	}
	out := web.PipelinePage{Repo: repo.FullName(), Branches: s.branches(ctx, dir, 100)}
	if out.Workflows, err = s.store.RunWorkflows(ctx, repo.ID, 100); err != nil {
		return out, err
	}
	if len(ps) == 0 {
		return out, nil
	}
	ids := make([]int64, len(ps))
	shas := make([]string, 0, len(ps))
	for i, p := range ps {
		ids[i] = p.ID
		shas = append(shas, p.SHA)
	}
	runs, err := s.store.RunsOfPipelines(ctx, ids)
	if err != nil {
		return out, err
	}
	if err := s.explainQueued(ctx, runs); err != nil {
		return out, err
	}
	all := make([]api.Run, len(runs))
	for i, r := range runs {
		all[i] = apiRun(r, nil)
	}
	if err := s.withNeeds(ctx, all); err != nil {
		return out, err
	}
	byPipeline := map[int64][]api.Run{}
	for _, r := range all {
		byPipeline[r.Pipeline] = append(byPipeline[r.Pipeline], r)
	}
	subjects := s.commitSubjects(ctx, dir, shas)
	for _, p := range ps {
		wp := web.Pipeline{ID: p.ID, Ref: p.Ref, SHA: p.SHA, Subject: subjects[p.SHA], Event: p.Event, Actor: p.Actor,
			CreatedAt: p.CreatedAt, Notes: p.Notes, RerunOf: p.RerunOf}
		ended, failed := true, false
		for _, r := range byPipeline[p.ID] {
			ended = ended && api.IsFinal(r.State)
			failed = failed || r.State != api.StateSucceeded
			if (q.State == "" || r.State == q.State) && (q.Workflow == "" || r.Workflow == q.Workflow) {
				wp.Runs = append(wp.Runs, r)
			} else {
				wp.Hidden++
			}
		}
		wp.CanRerunFailed = canManage(a, repo) && ended && failed
		out.Pipelines = append(out.Pipelines, wp)
	}
	if len(ps) == f.Limit {
		out.Older = ps[len(ps)-1].ID
	}
	return out, nil
}

// branches lists the repository's branches, the most recently committed
// to first, at most n ("" and nothing on error: the filter then has no
// suggestions).
func (s *Server) branches(ctx context.Context, dir string, n int) []string {
	b, err := s.git(ctx, dir, "for-each-ref", "--sort=-committerdate", "--count="+strconv.Itoa(n), "--format=%(refname:lstrip=2)", "refs/heads/")
	if err != nil {
		s.log.Debug("list branches", "err", err)
		return nil
	}
	return strings.Fields(string(b))
}

// commitSubjects returns the first line of each commit's message, by SHA,
// in one git call; commits git cannot read are left out.
func (s *Server) commitSubjects(ctx context.Context, dir string, shas []string) map[string]string {
	out := map[string]string{}
	args := []string{"log", "--no-walk=unsorted", "--format=%H %s", "--ignore-missing"}
	seen := map[string]bool{}
	for _, sha := range shas {
		if isCommitID(sha) && !seen[sha] {
			seen[sha] = true
			args = append(args, sha)
		}
	}
	if len(seen) == 0 {
		return out
	}
	b, err := s.git(ctx, dir, args...)
	if err != nil {
		s.log.Debug("read commit messages", "err", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if sha, subject, ok := strings.Cut(line, " "); ok {
			out[sha] = subject
		}
	}
	return out
}

func (b webBackend) Run(ctx context.Context, v web.Viewer, id int64) (web.Run, error) {
	s := b.s
	a := viewerAccount(v)
	var run api.Run
	if err := s.callAs(ctx, a, api.MethodGetRun, url.Values{"run": {strconv.FormatInt(id, 10)}}, nil, &run); err != nil {
		return web.Run{}, err
	}
	stored, err := s.store.Run(ctx, id)
	if err != nil {
		return web.Run{}, err
	}
	rows, err := s.store.Steps(ctx, id)
	if err != nil {
		return web.Run{}, err
	}
	// Who may see a run may cancel it (cancelRun: visibleRun); who may
	// trigger runs of its repository may re-run it (rerun: canManage).
	out := web.Run{Run: run, CanCancel: !api.IsFinal(run.State), CanRerun: api.IsFinal(run.State) && canManage(a, store.Repo{OwnerID: stored.RepoOwnerID})}
	// Steps carry the start and end the runner measured (steps.started_at,
	// finished_at). Rows from before those columns have only UpdatedAt,
	// which is set when a step starts and when it ends: the end of one
	// step is then the start of the next, the first starts with the run.
	prevEnd := run.StartedAt
	for _, st := range run.Steps {
		ws := web.Step{Step: st, Done: stepDone(stored, rows, st.Index)}
		var row *store.Step
		for i := range rows {
			if rows[i].Index == st.Index {
				row = &rows[i]
			}
		}
		switch {
		case row != nil && (row.StartedAt != nil || row.FinishedAt != nil):
			ws.Started, ws.Ended = row.StartedAt, row.FinishedAt
		case row != nil && st.State == api.StepRunning:
			ws.Started = &row.UpdatedAt
		case row != nil && api.StepIsFinal(st.State) && st.State != api.StepSkipped:
			ws.Started, ws.Ended = prevEnd, &row.UpdatedAt
			if st.Index == api.SetupStep && run.StartedAt == nil {
				ws.Started = nil
			}
		}
		if ws.Ended != nil {
			prevEnd = ws.Ended
		}
		out.Steps = append(out.Steps, ws)
	}
	if out.Expired, err = s.expiredAt(ctx, id); err != nil {
		return web.Run{}, err
	}
	if run.Outputs != nil && out.Expired == nil {
		var o api.RunOutputs
		q := url.Values{"run": {strconv.FormatInt(id, 10)}, "limit": {"100"}}
		if err := s.callAs(ctx, a, api.MethodListOutputs, q, nil, &o); err == nil {
			out.Outputs = o.Entries
		}
	}
	return out, nil
}

func (b webBackend) RunChanged(id int64) <-chan struct{} { return b.s.hub.wait(runKey(id)) }

func (b webBackend) Closing() <-chan struct{} { return b.s.closing }

func (b webBackend) ReadLog(ctx context.Context, v web.Viewer, run int64, step int, from, to int64) ([]byte, error) {
	s := b.s
	if err := s.checkStep(int64(step)); err != nil {
		return nil, err
	}
	if _, err := s.visibleRun(ctx, viewerAccount(v), run); err != nil {
		return nil, err
	}
	size, err := s.logs.size(run, step)
	if err != nil {
		return nil, err
	}
	to = min(to, size)
	if from >= to {
		return nil, nil
	}
	var buf bytes.Buffer
	buf.Grow(int(to - from))
	if err := s.logs.copyRange(&buf, run, step, from, to); err != nil {
		return nil, s.storeUnavailable(err, "log", "run", run, "step", step)
	}
	return buf.Bytes(), nil
}

func (b webBackend) LineTimes(ctx context.Context, v web.Viewer, run int64, step int, from, to int64) ([]api.LineTime, error) {
	s := b.s
	if err := s.checkStep(int64(step)); err != nil {
		return nil, err
	}
	if _, err := s.visibleRun(ctx, viewerAccount(v), run); err != nil {
		return nil, err
	}
	times, err := s.logs.lineTimes(run, step, from, to, 0, true)
	if err != nil {
		return nil, s.storeUnavailable(err, "line times", "run", run, "step", step)
	}
	return times, nil
}

// xrpcRequest is r turned into a GET of an XRPC method with query q, for
// handlers that write their answer to the real ResponseWriter.
func xrpcRequest(r *http.Request, nsid string, q url.Values) *http.Request {
	r2 := r.Clone(r.Context())
	r2.Method = http.MethodGet
	r2.URL = &url.URL{Path: "/xrpc/" + nsid, RawQuery: q.Encode()}
	r2.Body = http.NoBody
	return r2
}

func (b webBackend) ServeLog(w http.ResponseWriter, r *http.Request, v web.Viewer, run int64, step int) error {
	q := url.Values{"run": {strconv.FormatInt(run, 10)}, "step": {strconv.Itoa(step)}}
	return storeDown(w, b.s.unlessExpired(b.s.logsExpired, b.s.getLog)(w, xrpcRequest(r, api.MethodGetRunLog, q), viewerAccount(v)))
}

// storeDown answers a download the object store failed as 503 with the
// store's reason in plain text (the pages would call it an internal
// error); other errors pass to the pages.
func storeDown(w http.ResponseWriter, err error) error {
	if !api.IsError(err, errStoreUnavailable) {
		return err
	}
	var e *api.Error
	errors.As(err, &e)
	w.Header().Del("Content-Disposition")
	http.Error(w, e.Message, http.StatusServiceUnavailable)
	return nil
}

func (b webBackend) ServeOutputs(w http.ResponseWriter, r *http.Request, v web.Viewer, run int64) error {
	q := url.Values{"run": {strconv.FormatInt(run, 10)}}
	return storeDown(w, b.s.unlessExpired(b.s.outputsExpired, b.s.getOutputs)(w, xrpcRequest(r, api.MethodGetOutputs, q), viewerAccount(v)))
}

func (b webBackend) Usage(ctx context.Context, v web.Viewer, repo string) (api.RepoUsage, error) {
	var out api.RepoUsage
	err := b.s.callAs(ctx, viewerAccount(v), api.MethodRepoUsage, url.Values{"repo": {repo}}, nil, &out)
	return out, err
}

func (b webBackend) Schedules(ctx context.Context, v web.Viewer, repo string) (api.ScheduleList, error) {
	var out api.ScheduleList
	err := b.s.callAs(ctx, viewerAccount(v), api.MethodListSchedules, url.Values{"repo": {repo}}, nil, &out)
	return out, err
}

func (b webBackend) PauseSchedule(ctx context.Context, v web.Viewer, in api.PauseScheduleInput) (api.Schedule, error) {
	var out api.Schedule
	err := b.s.callAs(ctx, viewerAccount(v), api.MethodPauseSchedule, nil, in, &out)
	return out, err
}

func (b webBackend) CancelRun(ctx context.Context, v web.Viewer, id int64) error {
	return b.s.callAs(ctx, viewerAccount(v), api.MethodCancelRun, nil, api.RunRef{Run: id}, nil)
}

func (b webBackend) Rerun(ctx context.Context, v web.Viewer, in api.RerunInput) (api.Pipeline, error) {
	var out api.Pipeline
	err := b.s.callAs(ctx, viewerAccount(v), api.MethodRerun, nil, in, &out)
	return out, err
}

// runnerOnline is how recently a runner must have been heard from to show
// as online: a runner's claim long poll and heartbeats reach the server
// far more often.
func (s *Server) runnerOnline() time.Duration { return max(2*s.cfg.Lease, time.Minute) }

func (b webBackend) Runners(ctx context.Context, v web.Viewer, full string) (web.RunnersPage, error) {
	s := b.s
	a := viewerAccount(v)
	var list api.ListRunnersOutput
	if err := s.callAs(ctx, a, api.MethodListRunners, url.Values{"repo": {full}}, nil, &list); err != nil {
		return web.RunnersPage{}, err
	}
	repo, err := s.managedRepo(ctx, a, full)
	if err != nil {
		return web.RunnersPage{}, err
	}
	procs, err := s.store.RunnerProcesses(ctx, repo.ID)
	if err != nil {
		return web.RunnersPage{}, err
	}
	active, err := s.store.ActiveRuns(ctx, repo.ID)
	if err != nil {
		return web.RunnersPage{}, err
	}
	xs, err := s.store.ListRunners(ctx, repo.ID, "", 0)
	if err != nil {
		return web.RunnersPage{}, err
	}
	ids := map[string]int64{}
	for _, x := range xs {
		ids[x.Name] = x.ID
	}
	out := web.RunnersPage{Repo: repo.FullName()}
	for _, x := range list.Runners {
		id := ids[x.Name]
		p := procs[id]
		wr := web.Runner{Runner: x, Executor: p.Executor, Version: p.Version, Digest: p.Digest, Capacity: p.Capacity}
		for _, k := range slices.Sorted(maps.Keys(p.Facts)) {
			wr.Facts = append(wr.Facts, web.Fact{Name: k, Value: p.Facts[k]})
		}
		wr.Online = x.Status == api.RunnerApproved && x.LastSeenAt != nil && time.Since(*x.LastSeenAt) < s.runnerOnline()
		for _, r := range active {
			if r.RunnerID == id {
				wr.Held = append(wr.Held, apiRun(r, nil))
			}
		}
		out.Runners = append(out.Runners, wr)
	}
	return out, nil
}

func (b webBackend) ApproveRunner(ctx context.Context, v web.Viewer, repo, name, did string) error {
	if did == "" {
		return badRequest("approving from the web needs the runner's DID")
	}
	return b.s.callAs(ctx, viewerAccount(v), api.MethodApproveRunner, nil, api.RunnerRef{Repo: repo, Name: name, DID: did}, nil)
}

func (b webBackend) RemoveRunner(ctx context.Context, v web.Viewer, repo, name string) error {
	return b.s.callAs(ctx, viewerAccount(v), api.MethodRemoveRunner, nil, api.RunnerRef{Repo: repo, Name: name}, nil)
}

// recordRunnerProcess keeps what a runner's new process said of itself
// (dev.knotless.runner.startSession) for the Runners tab.
func (s *Server) recordRunnerProcess(ctx context.Context, x store.Runner, in api.StartSessionInput, now time.Time) {
	if err := s.store.SetRunnerProcess(ctx, store.RunnerProcess{RunnerID: x.ID, Executor: in.Executor, Version: in.Version,
		Digest: in.Digest, Capacity: in.Capacity, Facts: in.Facts, StartedAt: now}); err != nil {
		s.log.Warn("record runner process", "runner", x.Name, "err", err)
	}
}

// isCommitID reports whether sha is a full SHA-1 or SHA-256 commit id in
// lower-case hex (so that git never reads it as an option).
func isCommitID(sha string) bool {
	if len(sha) != 40 && len(sha) != 64 {
		return false
	}
	for _, c := range sha {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}
