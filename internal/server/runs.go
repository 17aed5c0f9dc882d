package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/store"
	"knotless.dev/knotless/internal/workflow"
)

// apiRun converts a stored run; steps may be nil.
func apiRun(r store.Run, steps []api.Step) api.Run {
	return api.Run{
		ID: r.ID, Pipeline: r.PipelineID, Repo: r.Repo, Ref: r.Ref, SHA: r.SHA, Event: r.Event,
		BeforeSHA: r.BeforeSHA, Actor: r.Actor, PipelineNotes: r.Notes, PipelineRerunOf: r.RerunOf,
		Workflow: r.Workflow, WorkflowPath: r.WorkflowPath, State: r.State, Reason: r.Reason,
		Message: r.Message, ExitCode: r.ExitCode, Runner: r.RunnerName, CreatedAt: r.CreatedAt,
		StartedAt: r.StartedAt, FinishedAt: r.FinishedAt, Steps: steps, ConcurrencyGroup: r.ConcurrencyGroup,
		Matrix: r.Matrix, Attempt: r.Attempt, RetryOf: r.RetryOf, RetriedBy: r.RetriedBy,
		NotRetried: notRetried(r),
	}
}

// notRetried says why r, errored, with `retry:` and no next attempt, was
// not retried ("" for any other run), as the store decided it (errored,
// reason in RetryWhen, Attempt <= RetryMax: sqlstore's afterEnd).
func notRetried(r store.Run) string {
	if r.State != api.StateErrored || r.RetryMax == 0 || r.RetriedBy != 0 {
		return ""
	}
	switch {
	case r.Reason == api.ReasonUnsupported:
		return "unsupported is never retried: this runner cannot run what the workflow asks, and every attempt would end the same way"
	case !slices.Contains(workflow.RetryReasons, r.Reason):
		return fmt.Sprintf("%s is not a fault of the environment that another attempt can mend (retry is for: %s)", r.Reason, strings.Join(workflow.RetryReasons, ", "))
	case !slices.Contains(r.RetryWhen, r.Reason):
		return fmt.Sprintf("retry's when does not name %s (it names: %s)", r.Reason, strings.Join(r.RetryWhen, ", "))
	case r.Attempt > r.RetryMax:
		return fmt.Sprintf("attempt %d was the last: retry allows %d after the first", r.Attempt, r.RetryMax)
	}
	return ""
}

// runSteps returns a run's steps with their log sizes.
func (s *Server) runSteps(ctx context.Context, id int64) ([]api.Step, error) {
	rows, err := s.store.Steps(ctx, id)
	if err != nil {
		return nil, err
	}
	out := make([]api.Step, 0, len(rows))
	for _, st := range rows {
		size, err := s.logs.size(id, st.Index)
		if err != nil {
			return nil, err
		}
		step := api.Step{Index: st.Index, Name: st.Name, State: st.State, ExitCode: st.ExitCode,
			Reason: st.Reason, LogSize: size, StartedAt: st.StartedAt, FinishedAt: st.FinishedAt}
		if st.StartedAt != nil && st.FinishedAt != nil {
			d := max(st.FinishedAt.Sub(*st.StartedAt).Milliseconds(), 0)
			step.DurationMS = &d
		}
		out = append(out, step)
	}
	return out, nil
}

// runFinished is the RunFinished answer about a run that already ended.
func runFinished(run store.Run) *api.Error {
	how := run.State
	if run.Reason != "" && run.Reason != run.State {
		how += " (" + run.Reason + ")"
	}
	return xerr(http.StatusConflict, api.ErrRunFinished, "run %d already ended %s; its result stands", run.ID, how)
}

// visibleRun loads a run the caller may read (its repository's owner or an
// admin); any other run is 404 NotFound, as one that does not exist.
func (s *Server) visibleRun(ctx context.Context, a store.Account, id int64) (store.Run, error) {
	run, err := s.store.Run(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return run, xerr(http.StatusNotFound, api.ErrNotFound, "no run %d", id)
	}
	if err != nil {
		return run, err
	}
	if !a.Admin && a.ID != run.RepoOwnerID {
		// As for a run that does not exist: run IDs of other accounts'
		// repositories are not revealed.
		return run, xerr(http.StatusNotFound, api.ErrNotFound, "no run %d", id)
	}
	return run, nil
}

func (s *Server) listRuns(w http.ResponseWriter, r *http.Request, a store.Account) error {
	ctx := r.Context()
	f := store.RunFilter{}
	limit, err := s.pageLimit(r, defaultRunPage)
	if err != nil {
		return err
	}
	f.Limit = limit
	if f.Before, err = intParam(r, "cursor", 0); err != nil || f.Before < 0 {
		return badRequest("parameter cursor: pass the cursor of the previous page")
	}
	if full := r.URL.Query().Get("repo"); full != "" {
		repo, err := s.managedRepo(ctx, a, full)
		if err != nil {
			return err
		}
		f.RepoID = repo.ID
	}
	if f.PipelineID, err = intParam(r, "pipeline", 0); err != nil {
		return err
	}
	if f.PipelineID != 0 {
		p, err := s.store.Pipeline(ctx, f.PipelineID)
		if errors.Is(err, store.ErrNotFound) {
			return xerr(http.StatusNotFound, api.ErrNotFound, "no pipeline %d", f.PipelineID)
		}
		if err != nil {
			return err
		}
		repo, err := s.store.RepoByID(ctx, p.RepoID)
		if err != nil {
			return err
		}
		if !canManage(a, repo) {
			return xerr(http.StatusNotFound, api.ErrNotFound, "no pipeline %d", f.PipelineID)
		}
	}
	if !a.Admin {
		f.OwnerID = a.ID
	}
	runs, err := s.store.ListRuns(ctx, f)
	if err != nil {
		return err
	}
	if err := s.explainQueued(ctx, runs); err != nil {
		return err
	}
	out := api.ListRunsOutput{Runs: []api.Run{}}
	for _, run := range runs {
		out.Runs = append(out.Runs, apiRun(run, nil))
	}
	if err := s.withNeeds(ctx, out.Runs); err != nil {
		return err
	}
	if len(runs) == limit {
		out.Cursor = strconv.FormatInt(runs[len(runs)-1].ID, 10)
	}
	switch {
	case f.PipelineID != 0 && len(runs) == 0:
		// A pipeline that ran nothing: the notes that say why.
		p, err := s.store.Pipeline(ctx, f.PipelineID)
		if err != nil {
			return err
		}
		out.EmptyPipelines = []api.EmptyPipeline{emptyPipeline(p)}
	case f.RepoID != 0 && f.PipelineID == 0 && f.Before == 0:
		if out.EmptyPipelines, err = s.emptyPipelines(ctx, f.RepoID, runs, out.Cursor == ""); err != nil {
			return err
		}
	}
	return writeJSON(w, out)
}

func emptyPipeline(p store.Pipeline) api.EmptyPipeline {
	return api.EmptyPipeline{ID: p.ID, Ref: p.Ref, SHA: p.SHA, Event: p.Event, CreatedAt: p.CreatedAt, Notes: p.Notes}
}

// emptyPipelines are the newest pipelines of repository repoID that made
// no run, at most 5: newer than the oldest run of runs (the page listed),
// or any when the page is the last (all, the repository's runs).
func (s *Server) emptyPipelines(ctx context.Context, repoID int64, runs []store.Run, last bool) ([]api.EmptyPipeline, error) {
	ps, err := s.store.ListPipelines(ctx, store.PipelineFilter{RepoID: repoID, Empty: true, Limit: 5})
	if err != nil {
		return nil, err
	}
	var oldest int64
	for _, r := range runs {
		if oldest == 0 || r.PipelineID < oldest {
			oldest = r.PipelineID
		}
	}
	var out []api.EmptyPipeline
	for _, p := range ps {
		if last || p.ID > oldest {
			out = append(out, emptyPipeline(p))
		}
	}
	return out, nil
}

func (s *Server) getRun(w http.ResponseWriter, r *http.Request, a store.Account) error {
	id, err := requiredInt(r, "run")
	if err != nil {
		return err
	}
	run, err := s.visibleRun(r.Context(), a, id)
	if err != nil {
		return err
	}
	steps, err := s.runSteps(r.Context(), id)
	if err != nil {
		return err
	}
	one := []store.Run{run}
	if err := s.explainQueued(r.Context(), one); err != nil {
		return err
	}
	out := apiRun(one[0], steps)
	out.Exports = one[0].Exports
	if out.Outputs, err = s.runOutputs(r, id); err != nil {
		return err
	}
	withNeeds := []api.Run{out}
	if err := s.withNeeds(r.Context(), withNeeds); err != nil {
		return err
	}
	out = withNeeds[0]
	return writeJSON(w, out)
}

// stepDone reports whether a step's log will not grow: the step reached a
// final state, or the run did.
func stepDone(run store.Run, steps []store.Step, index int) bool {
	if api.IsFinal(run.State) {
		return true
	}
	for _, st := range steps {
		if st.Index == index {
			if api.StepIsFinal(st.State) {
				return true
			}
		}
	}
	return false
}

func (s *Server) cancelRun(w http.ResponseWriter, r *http.Request, a store.Account) error {
	var in api.RunRef
	if err := decodeInput(r, &in); err != nil {
		return err
	}
	if in.Run <= 0 {
		return badRequest("run is required")
	}
	if _, err := s.visibleRun(r.Context(), a, in.Run); err != nil {
		return err
	}
	run, err := s.store.CancelRun(r.Context(), in.Run, s.now())
	if errors.Is(err, store.ErrRunFinished) {
		return runFinished(run)
	}
	if err != nil {
		return err
	}
	if run.State == api.StateCancelled {
		s.log.Info("run finished", "run", run.ID, "repo", run.Repo, "workflow", run.Workflow,
			"state", run.State, "reason", run.Reason, "by", a.Handle)
	} else {
		s.log.Info("run cancel requested", "run", run.ID, "repo", run.Repo, "runner", run.RunnerName, "by", a.Handle)
	}
	s.runEnded(r.Context(), run)
	s.notify(runKey(run.ID))
	steps, err := s.runSteps(r.Context(), run.ID)
	if err != nil {
		return err
	}
	return writeJSON(w, apiRun(run, steps))
}
