package runner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"time"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/cleanup"
	"knotless.dev/knotless/internal/executor"
	"knotless.dev/knotless/internal/logship"
	"knotless.dev/knotless/internal/version"
)

// A runner that starts finds in its work directory what an earlier process
// left: spools of runs it had finished (delivered now), and spools of runs
// it was running. Those the server says this runner still holds are taken
// over: the secrets come again (api.MethodResumeRun), the environment is
// recovered from the handle in the journal, the running step is attached
// to at the raw offset its log got to, and the run goes on. Only then are
// the environments and workspaces nobody takes over removed.

// takeover is a run this process continues.
type takeover struct {
	sp     *logship.Spool
	cr     *api.ClaimedRun
	resume *Resume
	id     string // the environment's ID when it was recovered, else ""
	// workspace is the run's checkout, as the journal names it (held in
	// r.workspaces).
	workspace string
}

// recoverSpools deals with every spool an earlier process left: a finished
// run's is delivered; an unfinished run that the server says this runner
// holds (held) is prepared for takeOver (returned); any other unfinished
// run is recorded errored/runner-lost and delivered (the server has ended
// it, or ends it now).
func (r *Runner) recoverSpools(ctx context.Context, held []api.HeldRun) []*takeover {
	ents, err := os.ReadDir(r.path("spool"))
	if err != nil {
		r.log.Error("list spools", "err", err)
		return nil
	}
	holds := map[int64]bool{}
	for _, h := range held {
		holds[h.Run] = true
	}
	var out []*takeover
	for _, e := range ents {
		if !e.IsDir() {
			continue
		}
		sp, err := logship.OpenSpool(r.path("spool", e.Name()))
		if err != nil {
			r.log.Error("open spool left by an earlier process", "dir", e.Name(), "err", err)
			continue
		}
		done, err := sp.Completed()
		if err != nil {
			r.log.Error("read spool left by an earlier process", "run", sp.Run(), "err", err)
		}
		if !done && holds[sp.Run()] {
			t, why := r.prepareTakeover(ctx, sp)
			if t != nil {
				out = append(out, t)
				continue
			}
			r.lost(sp, why)
		} else if !done {
			r.lost(sp, "the runner process stopped during the run")
		}
		sp.Close()
		r.log.Info("delivering spool left by an earlier process", "run", sp.Run(), "interrupted", !done)
		r.ship(ctx, sp)
	}
	return out
}

// lost records an unfinished run of an earlier process as errored/runner-lost.
func (r *Runner) lost(sp *logship.Spool, why string) {
	if err := (SpoolReporter{Spool: sp}).Done(Result{State: api.StateErrored, Reason: api.ReasonRunnerLost, Message: why}); err != nil {
		r.log.Error("record lost run", "run", sp.Run(), "err", err)
	}
}

// prepareTakeover reads sp's journal, asks the server for the run again and
// recovers its environment. On failure it says why, for the run's message.
func (r *Runner) prepareTakeover(ctx context.Context, sp *logship.Spool) (*takeover, string) {
	log := r.log.With("run", sp.Run())
	rec, err := sp.Record()
	if err != nil || rec.Claim == nil {
		log.Error("cannot take over a run: its journal does not say what was claimed", "err", err)
		return nil, "the runner process stopped during the run and left too little record of it to go on"
	}
	var cr *api.ClaimedRun
	for attempt := 0; ; attempt++ {
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		cr, err = r.client.ResumeRun(cctx, sp.Run())
		cancel()
		if err == nil || !api.Retryable(err) || attempt == 5 || ctx.Err() != nil {
			break
		}
		time.Sleep(api.RetryWait(attempt, err, r.cfg.MaxBackoff))
	}
	if err != nil {
		log.Warn("cannot take over a run the server said this runner holds", "err", err)
		return nil, "the runner process stopped during the run and its successor could not take it over: " + err.Error()
	}
	resume, err := resumeOf(sp, rec, fmt.Sprintf("knotless-run %s (process %d)", version.Version, os.Getpid()), log)
	if err != nil {
		log.Error("cannot read the run's environment handle", "err", err)
		return nil, "the runner process stopped during the run and its record of the environment is unreadable"
	}
	workspace := rec.Claim.Workspace
	if workspace == "" {
		// Journal of a runner before stable workspaces.
		workspace = r.path("runs", strconv.FormatInt(sp.Run(), 10), "workspace")
	}
	r.workspaces.hold(workspace)
	t := &takeover{sp: sp, cr: cr, resume: resume, workspace: workspace}
	if resume.Session != nil {
		h := *resume.Session
		sess, err := r.cfg.Executor.Recover(ctx, h)
		switch {
		case err == nil:
			resume.Recovered = sess
			t.id = h.ID
		case errors.Is(err, executor.ErrNotRecoverable):
			resume.RecoverErr = err
		default:
			// Transient: Execute tries again; keep the environment.
			t.id = h.ID
		}
	}
	log.Info("taking over a run from an earlier runner process", "recovered", resume.Recovered != nil,
		"setup_again", resume.Session == nil)
	return t, ""
}

// cleanWorkDir removes what an earlier process left and nobody takes over:
// run directories (WORK/runs/<run>), workspaces (WORK/workspaces/...) and
// executor environments. The workspaces and environments of takeovers stay.
func (r *Runner) cleanWorkDir(ctx context.Context, takeovers []*takeover) {
	var keepEnv, keepRuns, keepWorkspaces []string
	for _, t := range takeovers {
		if t.id != "" {
			keepEnv = append(keepEnv, t.id)
			keepRuns = append(keepRuns, strconv.FormatInt(t.sp.Run(), 10))
			keepWorkspaces = append(keepWorkspaces, t.workspace)
		}
	}
	for _, d := range r.workspaces.slotDirs() {
		if slices.Contains(keepWorkspaces, d) {
			continue
		}
		r.log.Info("removing workspace left by an earlier process", "dir", d)
		if err := cleanup.RemoveAll(d, r.log); err != nil {
			r.log.Error("remove leftover workspace", "err", err)
		}
	}
	ents, err := os.ReadDir(r.path("runs"))
	if err != nil {
		r.log.Error("list workspaces", "err", err)
	}
	for _, e := range ents {
		if slices.Contains(keepRuns, e.Name()) {
			continue
		}
		r.log.Info("removing workspace left by an earlier process", "dir", r.path("runs", e.Name()))
		if err := cleanup.RemoveAll(r.path("runs", e.Name()), r.log); err != nil {
			r.log.Error("remove leftover workspace", "err", err)
		}
	}
	if err := r.cfg.Executor.Sweep(ctx, keepEnv); err != nil {
		r.log.Error("sweep executor environments", "err", err)
		return
	}
	// The retries of this runner's ended runs wait for their
	// environments to be gone: they are.
	var keep []int64
	for _, t := range takeovers {
		if t.id != "" {
			keep = append(keep, t.sp.Run())
		}
	}
	if err := r.client.EnvironmentsRemoved(ctx, keep); err != nil {
		r.log.Warn("tell the server the environments of earlier processes are removed", "err", err)
	}
}

// takeOver continues a run an earlier process began.
func (r *Runner) takeOver(runsCtx, shipCtx context.Context, t *takeover) {
	r.execute(runsCtx, shipCtx, t.sp, t.cr, t.workspace, t.resume)
}

// stopHandingOver ends Run for the next process: the runs' executions let go of
// their environments (Job.Handover), deliveries and heartbeats stop, and
// the server is told, which keeps the runs for its handover grace.
func (r *Runner) stopHandingOver(done <-chan struct{}, stopShipping context.CancelFunc) error {
	r.log.Info("handing the runs over to the next knotless-run process on this work directory")
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		r.log.Warn("some runs did not let go of their environments within 30s; handing over anyway")
	}
	stopShipping()
	r.shippers.Wait()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	out, err := r.client.Handover(ctx, api.HandoverInput{Reason: "knotless-run handed over"})
	if err != nil {
		r.log.Warn("could not tell the server about the handover: the runs wait for the next process only as long as their leases", "err", err)
	} else {
		r.log.Info("handed over: the next knotless-run process on this work directory takes the runs over",
			"runs", len(out.Runs), "grace", time.Duration(out.GraceSeconds)*time.Second)
	}
	r.log.Info("runner stopped")
	return nil
}

// resumeOf is what rec, the journal of sp, tells a process that takes its
// run over (by names it): the steps' latest updates and starts, the
// checkpoint of each step left running (a checkpoint that cannot be read
// is a warning: that step's log resumes from its start) and the
// environment's handle (nil when the run never got one). Its error says
// the handle is unreadable.
func resumeOf(sp *logship.Spool, rec logship.Record, by string, log *slog.Logger) (*Resume, error) {
	resume := &Resume{
		Steps:       rec.Steps,
		StepStarted: rec.Started,
		Checkpoints: map[int]logship.Checkpoint{},
		By:          by,
		// Outputs packed already are in the spool: shipped, not collected again.
		OutputsCollected: rec.Outputs != nil,
	}
	if rec.Claim != nil {
		resume.Started = rec.Claim.Started
	}
	for idx, u := range rec.Steps {
		if u.State == api.StepRunning && idx > 0 {
			c, ok, err := sp.LastCheckpoint(idx)
			if err != nil {
				log.Warn("read a step's checkpoint; its log resumes from the start", "step", idx, "err", err)
			}
			if ok {
				resume.Checkpoints[idx] = c
			}
		}
	}
	if len(rec.Session) > 0 {
		var h executor.Handle
		if err := json.Unmarshal(rec.Session, &h); err != nil {
			return nil, err
		}
		resume.Session = &h
	}
	return resume, nil
}
