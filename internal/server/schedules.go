package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/schedule"
	"knotless.dev/knotless/internal/store"
	"knotless.dev/knotless/internal/units"
	"knotless.dev/knotless/internal/workflow"
)

// Scheduled runs (issue 38; docs/workflow.md, "Schedules"). The
// workflows on a repository's default branch declare schedules; after each
// push of that branch the server keeps them in the store (SyncSchedules).
// Every replica wakes at the earliest next due time and fires what is due:
// CreatePipeline moves the schedule's next time in the transaction that
// creates the pipeline, so one due time starts one pipeline, on one
// replica, and a replica that dies before its commit leaves the time due
// for the next one.

// Schedules are the server's settings for scheduled runs.
type Schedules struct {
	// MinInterval is the shortest time between two due times of one
	// schedule the server runs; a schedule due more often never runs and
	// says so. Default DefaultScheduleMinInterval
	// (knotless-server --schedule-min-interval).
	MinInterval time.Duration
	// Recheck is how long a replica waits at most before it looks again
	// for due schedules (those another replica stored since). Default 30 s.
	Recheck time.Duration
}

// DefaultScheduleMinInterval is Schedules.MinInterval's default.
const DefaultScheduleMinInterval = 5 * time.Minute

func (c *Schedules) fill() {
	if c.MinInterval <= 0 {
		c.MinInterval = DefaultScheduleMinInterval
	}
	if c.Recheck <= 0 {
		c.Recheck = 30 * time.Second
	}
}

// scheduleFireHook, when set (tests), is called with a schedule's id
// right before the pipeline that fires it is created.
var scheduleFireHook atomic.Pointer[func(id int64)]

// scheduleBatch is how many due schedules one pass fires at most before
// it looks again.
const scheduleBatch = 100

// scheduleState is the firing loop's: wake nudges it (a push stored new
// schedules, one was resumed), done is closed when it ended.
type scheduleState struct {
	wake chan struct{}
	done chan struct{}
}

// wakeSchedules makes the loop look again at once.
func (s *Server) wakeSchedules() {
	select {
	case s.sched.wake <- struct{}{}:
	default:
	}
}

// schedulesChanged wakes the loop of this replica and of every other
// (a notification), so that a schedule due within Recheck is timed.
func (s *Server) schedulesChanged(repoID int64) {
	s.wakeSchedules()
	s.publish(noteSchedules, strconv.FormatInt(repoID, 10))
}

// scheduleLoop fires due schedules until the server closes: it sleeps
// until the earliest next due time (at most Recheck), fires every due
// schedule, and after a failing pass waits Recheck before it tries again.
func (s *Server) scheduleLoop() {
	defer close(s.sched.done)
	cfg := s.cfg.Schedules
	for {
		wait := cfg.Recheck
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		if at, ok, err := s.store.NextScheduleAt(ctx); err == nil && ok {
			wait = min(wait, max(at.Sub(s.now()), 0))
		}
		cancel()
		t := time.NewTimer(wait)
		select {
		case <-s.closing:
			t.Stop()
			return
		case <-s.sched.wake:
		case <-t.C:
		}
		t.Stop()
		ctx, cancel = context.WithTimeout(context.Background(), 5*time.Minute)
		_, err := s.FireSchedules(ctx)
		cancel()
		if err != nil {
			s.log.Warn("fire schedules", "err", err)
			select {
			case <-s.closing:
				return
			case <-time.After(cfg.Recheck):
			}
		}
	}
}

// FireSchedules fires every schedule due at the server's time now (at
// most scheduleBatch at a time, until none is due) and returns how many
// pipelines it started. A due time another replica fired meanwhile is
// not counted and not an error. The error joins those of schedules that
// could not be fired now (a database or git failure); they stay due.
func (s *Server) FireSchedules(ctx context.Context) (int, error) {
	started := 0
	var errs []error
	for {
		now := s.now()
		due, err := s.store.DueSchedules(ctx, now, scheduleBatch)
		if err != nil {
			return started, errors.Join(append(errs, err)...)
		}
		moved := 0
		for _, sc := range due {
			ok, err := s.fireSchedule(ctx, sc, now)
			switch {
			case err != nil:
				errs = append(errs, fmt.Errorf("schedule %d of %s: %w", sc.ID, sc.Repo, err))
			case ok:
				started++
				moved++
			default:
				moved++
			}
		}
		if len(due) < scheduleBatch || moved == 0 {
			return started, errors.Join(errs...)
		}
	}
}

// fireSchedule starts sc's pipeline for its latest due time not after
// now, or skips that time with the reason it cannot run. It returns true
// when it started the pipeline; false (and no error) when it skipped the
// time or another replica took it first.
func (s *Server) fireSchedule(ctx context.Context, sc store.Schedule, now time.Time) (bool, error) {
	spec, err := schedule.Parse(sc.Cron, sc.TimeZone, now)
	if err != nil {
		// Stored only after it parsed: a zone the server no longer knows.
		return s.skipSchedule(ctx, sc, now.Add(24*time.Hour), err.Error())
	}
	due, missed, ok := spec.Latest(sc.NextAt, now)
	if !ok {
		return false, nil
	}
	next := spec.Next(now)
	if next.IsZero() {
		next = now.AddDate(5, 0, 0)
	}
	if problem := s.tooOften(spec, now); problem != "" {
		return s.skipSchedule(ctx, sc, next, problem)
	}
	repo, err := s.repoByFullName(ctx, sc.Repo)
	if err != nil {
		return false, err
	}
	dir, err := s.repoDir(repo.Owner, repo.Name)
	if err != nil {
		return false, err
	}
	tgt, problem, err := s.scheduleTarget(ctx, dir, sc.ScheduleKey, nil)
	if err != nil {
		return false, err
	}
	if problem != "" {
		return s.skipSchedule(ctx, sc, next, problem)
	}
	ev := workflow.Event{Kind: workflow.EventSchedule, Ref: tgt.ref}
	planned := planRuns(tgt.parsed, ev, false, func(pw parsedWorkflow) bool { return pw.Path == sc.Workflow })
	head := []string{fmt.Sprintf("Scheduled by %s in %s, due %s.", describeCron(sc.ScheduleKey), sc.Workflow, utcMinute(due))}
	if missed > 0 {
		head = append(head, fmt.Sprintf("%d earlier %s passed while no server could start %s; only the latest runs.",
			missed, plural(missed, "time", "times"), plural(missed, "it", "them")))
	}
	if h := scheduleFireHook.Load(); h != nil {
		(*h)(sc.ID)
	}
	fire := &store.ScheduleFire{ID: sc.ID, Expected: sc.NextAt, Due: due, Next: next}
	p, runs, err := s.createPipeline(ctx, repo, tgt.ref, tgt.sha, api.EventSchedule,
		trigger{actor: api.ScheduleActor, notes: append(head, tgt.notes...), schedule: fire}, planned)
	if errors.Is(err, store.ErrConflict) {
		return false, nil // another replica fired this time
	}
	if err != nil {
		return false, err
	}
	s.log.Info("schedule fired", "schedule", sc.ID, "repo", sc.Repo, "workflow", sc.Workflow, "cron", sc.Cron,
		"due", due, "missed", missed, "pipeline", p.ID, "runs", len(runs), "next", next)
	return true, nil
}

// skipSchedule moves sc past its due time without a run, recording why.
func (s *Server) skipSchedule(ctx context.Context, sc store.Schedule, next time.Time, problem string) (bool, error) {
	moved, err := s.store.SkipSchedule(ctx, sc.ID, sc.NextAt, next, problem)
	if err != nil {
		return false, err
	}
	if moved && problem != sc.Problem { // said once, not at every due time
		s.log.Warn("schedule skipped a due time", "schedule", sc.ID, "repo", sc.Repo, "workflow", sc.Workflow,
			"cron", sc.Cron, "why", problem, "next", next)
	}
	return false, nil
}

// tooOften is why spec may not run on this server (due more often than
// Schedules.MinInterval), or "". Each replica decides with its own
// setting, so replicas should share one.
func (s *Server) tooOften(spec *schedule.Spec, now time.Time) string {
	least := s.cfg.Schedules.MinInterval
	if iv := spec.MinInterval(now); iv > 0 && iv < least {
		return fmt.Sprintf("due as often as every %s, more often than this server allows (at most every %s: knotless-server --schedule-min-interval)",
			units.FormatDuration(iv), units.FormatDuration(least))
	}
	return ""
}

// target is where a schedule runs now: its branch, the tip's ref and
// commit, and the workflows there (with their notes, workflowsAt's).
type target struct {
	branch, ref, sha string
	parsed           []parsedWorkflow
	notes            []string
}

// scheduleTarget finds where schedule k runs now: the tip of its branch
// ("" is the default branch) and the workflows there. problem says why it
// cannot run there (no default branch, no such branch, no such file, or a
// copy without on.schedule); err is a failure to read git. tips, when
// not nil, keeps what was read by commit for the next call.
func (s *Server) scheduleTarget(ctx context.Context, dir string, k store.ScheduleKey, tips map[string]*target) (t *target, problem string, err error) {
	t = &target{branch: k.Branch}
	if t.branch == "" {
		out, err := s.git(ctx, dir, "symbolic-ref", "HEAD")
		if err != nil {
			return t, "the repository has no default branch", nil
		}
		t.branch = strings.TrimPrefix(strings.TrimSpace(string(out)), "refs/heads/")
	}
	t.ref = "refs/heads/" + t.branch
	out, err := s.git(ctx, dir, "show-ref", "--verify", "--hash", "--", t.ref)
	if err != nil {
		return t, fmt.Sprintf("branch %s does not exist: its times are skipped until it is pushed", api.VisibleText(t.branch)), nil
	}
	sha, ok := s.commitOf(ctx, dir, strings.TrimSpace(string(out)))
	if !ok {
		return t, fmt.Sprintf("branch %s does not point at a commit", api.VisibleText(t.branch)), nil
	}
	if known := tips[sha]; known != nil {
		t.sha, t.parsed, t.notes = sha, known.parsed, known.notes
	} else {
		files, notes, err := s.workflowsAt(ctx, dir, sha)
		if err != nil {
			return t, "", err
		}
		t.sha, t.parsed, t.notes = sha, parseAll(files), notes
		if tips != nil {
			tips[sha] = t
		}
	}
	return t, scheduledWorkflowProblem(t.parsed, k.Workflow, t.branch), nil
}

// scheduledWorkflowProblem is why the file at wfPath on branch cannot be
// a schedule's run (absent, or without on.schedule), or "". A file that
// does not parse runs as an errored run, which says why.
func scheduledWorkflowProblem(parsed []parsedWorkflow, wfPath, branch string) string {
	for _, pw := range parsed {
		if pw.Path != wfPath {
			continue
		}
		if pw.Err == nil && !pw.WF.Matches(workflow.Event{Kind: workflow.EventSchedule}) {
			return fmt.Sprintf("%s on branch %s has no on.schedule, so the schedule does not run it", wfPath, api.VisibleText(branch))
		}
		return ""
	}
	return fmt.Sprintf("there is no %s on branch %s", wfPath, api.VisibleText(branch))
}

// describeCron writes a schedule for people: `"0 3 * * *" (UTC)`.
func describeCron(k store.ScheduleKey) string {
	zone := k.TimeZone
	if zone == "" {
		zone = "UTC"
	}
	return fmt.Sprintf("%q (%s)", api.VisibleText(k.Cron), api.VisibleText(zone))
}

// utcMinute writes a due time as "2026-12-08 03:00 UTC".
func utcMinute(t time.Time) string { return t.UTC().Format("2006-01-02 15:04 UTC") }

// pushSchedules syncs the schedules after a push of the default branch
// (at is "main at 1a2b3c4") and returns the pusher's lines about them.
func (s *Server) pushSchedules(ctx context.Context, repo store.Repo, dir, at string, parsed []parsedWorkflow) []string {
	lines, err := s.syncSchedules(ctx, repo, dir, parsed)
	if err != nil {
		s.log.Error("store schedules after a push", "repo", repo.FullName(), "err", err)
		return []string{at + ": its schedules were not stored: the server's log says why"}
	}
	return lines
}

// syncSchedules stores the schedules of parsed, the workflows at the tip
// of repo's default branch, and returns what the pusher should read: each
// schedule's next time, that it is paused, or why it does not run. A file
// that does not parse keeps the schedules it had (and a line says so), so
// a typo neither drops nor resets them.
func (s *Server) syncSchedules(ctx context.Context, repo store.Repo, dir string, parsed []parsedWorkflow) ([]string, error) {
	now := s.now()
	old, err := s.store.Schedules(ctx, repo.ID)
	if err != nil {
		return nil, err
	}
	broken := map[string]int{} // path → schedules it keeps
	at := map[store.ScheduleKey]string{}
	var want []store.NewSchedule
	for _, pw := range parsed {
		if pw.Err != nil {
			broken[pw.Path] = 0
			continue
		}
		for _, st := range pw.WF.On.Schedule {
			ns := newSchedule(pw.Path, st, now)
			want = append(want, ns)
			at[ns.ScheduleKey] = fmt.Sprintf("%s:%d:%d: schedule %s", pw.Path, st.Line, st.Column, describeCron(ns.ScheduleKey))
		}
	}
	for _, sc := range old {
		if n, ok := broken[sc.Workflow]; ok {
			broken[sc.Workflow] = n + 1
			want = append(want, store.NewSchedule{ScheduleKey: sc.ScheduleKey, NextAt: sc.NextAt, Problem: sc.Problem})
		}
	}
	if len(want) == 0 && len(old) == 0 {
		return nil, nil
	}
	rows, err := s.store.SyncSchedules(ctx, repo.ID, want)
	if err != nil {
		return nil, err
	}
	s.schedulesChanged(repo.ID)
	var lines []string
	tips := map[string]*target{}
	for _, sc := range rows {
		if where, ok := at[sc.ScheduleKey]; ok {
			lines = append(lines, where+": "+s.scheduleState(ctx, dir, sc, now, tips))
		}
	}
	for _, pw := range parsed {
		if n := broken[pw.Path]; n > 0 {
			lines = append(lines, fmt.Sprintf("%s does not parse, so its %d %s until it does (knotless workflow lint)",
				pw.Path, n, plural(n, "schedule stays as it was", "schedules stay as they were")))
		}
	}
	return lines, nil
}

// newSchedule makes the stored form of one on.schedule entry of the file
// at wfPath: its first time after now (the workflow parser checked the
// expression; a zone this host lacks is the schedule's problem).
func newSchedule(wfPath string, st workflow.ScheduleTrigger, now time.Time) store.NewSchedule {
	zone := st.TimeZone
	if zone == "" {
		zone = "UTC"
	}
	ns := store.NewSchedule{ScheduleKey: store.ScheduleKey{Workflow: wfPath, Cron: st.Cron, TimeZone: zone, Branch: st.Branch}}
	spec, err := schedule.Parse(st.Cron, zone, now)
	if err != nil {
		ns.NextAt, ns.Problem = now.AddDate(5, 0, 0), err.Error()
		return ns
	}
	ns.NextAt = spec.Next(now)
	return ns
}

// scheduleState says in words what sc does next, as a push line ends:
// "next run 2026-12-08 03:00 UTC on main", "paused by alice since ...",
// or "not running: WHY".
func (s *Server) scheduleState(ctx context.Context, dir string, sc store.Schedule, now time.Time, tips map[string]*target) string {
	a := s.apiSchedule(ctx, dir, sc, now, tips)
	switch {
	case a.Paused:
		return fmt.Sprintf("paused by %s since %s (knotless schedule resume %d --repo %s)", a.PausedBy, utcMinute(*a.PausedAt), a.ID, a.Repo)
	case a.Problem != "":
		return "not running: " + a.Problem
	}
	return fmt.Sprintf("next run %s on %s", utcMinute(*a.NextAt), api.VisibleText(a.Branch))
}

// listSchedules answers api.MethodListSchedules.
func (s *Server) listSchedules(w http.ResponseWriter, r *http.Request, a store.Account) error {
	ctx := r.Context()
	repo, err := s.managedRepo(ctx, a, r.URL.Query().Get("repo"))
	if err != nil {
		return err
	}
	rows, err := s.store.Schedules(ctx, repo.ID)
	if err != nil {
		return err
	}
	dir, err := s.repoDir(repo.Owner, repo.Name)
	if err != nil {
		return err
	}
	out := api.ScheduleList{Schedules: make([]api.Schedule, 0, len(rows)),
		MinIntervalSeconds: int64(s.cfg.Schedules.MinInterval / time.Second)}
	now, tips := s.now(), map[string]*target{}
	for _, sc := range rows {
		out.Schedules = append(out.Schedules, s.apiSchedule(ctx, dir, sc, now, tips))
	}
	return writeJSON(w, out)
}

// apiSchedule converts a stored schedule. Its Problem is why it cannot
// run now, checked now (a zone this host lacks, due too often for this
// server, its branch or file missing there, or the file without
// on.schedule), never a stale reason of an earlier time; then it has no
// NextAt, nor while paused.
func (s *Server) apiSchedule(ctx context.Context, dir string, sc store.Schedule, now time.Time, tips map[string]*target) api.Schedule {
	out := api.Schedule{ID: sc.ID, Repo: sc.Repo, Workflow: sc.Workflow, Cron: sc.Cron, TimeZone: sc.TimeZone,
		LastAt: sc.LastAt, LastPipeline: sc.LastPipelineID,
		Paused: sc.Paused, PausedBy: sc.PausedBy, PausedAt: sc.PausedAt}
	tgt, problem, err := s.scheduleTarget(ctx, dir, sc.ScheduleKey, tips)
	out.Branch = tgt.branch
	if err != nil {
		problem = "its branch could not be read: the server's log says why"
		s.log.Warn("read a schedule's branch", "schedule", sc.ID, "repo", sc.Repo, "err", err)
	}
	if spec, err := schedule.Parse(sc.Cron, sc.TimeZone, now); err != nil {
		problem = err.Error()
	} else if p := s.tooOften(spec, now); p != "" {
		problem = p
	}
	out.Problem = problem
	if !sc.Paused && problem == "" {
		next := sc.NextAt
		out.NextAt = &next
	}
	return out
}

// pauseSchedule answers api.MethodPauseSchedule: only the repository's
// owner or an admin; a schedule of another repository is 404.
func (s *Server) pauseSchedule(w http.ResponseWriter, r *http.Request, a store.Account) error {
	ctx := r.Context()
	var in api.PauseScheduleInput
	if err := decodeInput(r, &in); err != nil {
		return err
	}
	repo, err := s.managedRepo(ctx, a, in.Repo)
	if err != nil {
		return err
	}
	sc, err := s.store.Schedule(ctx, in.ID)
	if errors.Is(err, store.ErrNotFound) || (err == nil && sc.RepoID != repo.ID) {
		return xerr(http.StatusNotFound, api.ErrNotFound, "no schedule %d in %s (knotless schedule list %s shows them)", in.ID, repo.FullName(), repo.FullName())
	}
	if err != nil {
		return err
	}
	now := s.now()
	next := sc.NextAt
	if spec, err := schedule.Parse(sc.Cron, sc.TimeZone, now); err == nil {
		next = spec.Next(now)
	}
	sc, err = s.store.PauseSchedule(ctx, sc.ID, in.Paused, a.Handle, now, next)
	if err != nil {
		return err
	}
	verb := "resumed"
	if in.Paused {
		verb = "paused"
	}
	s.log.Info("schedule "+verb, "schedule", sc.ID, "repo", repo.FullName(), "workflow", sc.Workflow, "by", a.Handle)
	s.schedulesChanged(repo.ID)
	dir, err := s.repoDir(repo.Owner, repo.Name)
	if err != nil {
		return err
	}
	return writeJSON(w, s.apiSchedule(ctx, dir, sc, now, nil))
}
