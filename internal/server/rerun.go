package server

import (
	"context"
	"errors"
	"net/http"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/store"
	"knotless.dev/knotless/internal/workflow"
)

// rerun answers dev.knotless.run.rerun: a new pipeline of the same ref,
// commit and event whose runs run again the workflows of the runs chosen
// (one final run, or every run of an ended pipeline that did not
// succeed), each from its file at that commit, whatever its `on:` says.
// Who may trigger runs of the repository (its owner, an admin) may re-run
// them; anyone else gets 404 NotFound, as for what does not exist.
func (s *Server) rerun(w http.ResponseWriter, r *http.Request, a store.Account) error {
	ctx := r.Context()
	var in api.RerunInput
	if err := decodeInput(r, &in); err != nil {
		return err
	}
	if (in.Run == 0) == (in.Pipeline == 0) {
		return badRequest("name a run or a pipeline (one of run, pipeline)")
	}
	p, again, err := s.rerunSelection(ctx, a, in)
	if err != nil {
		return err
	}
	repo, err := s.store.RepoByID(ctx, p.RepoID)
	if err != nil {
		return err
	}
	dir, err := s.repoDir(repo.Owner, repo.Name)
	if err != nil {
		return err
	}
	files, notes, err := s.workflowsAt(ctx, dir, p.SHA)
	if err != nil {
		return err
	}
	want := map[string]bool{}
	for _, run := range again {
		want[run.WorkflowPath] = true
	}
	parsed := parseAll(files)
	chosen := func(pw parsedWorkflow) bool { return want[workflow.DisplayPath(pw.Path)] }
	kind := workflow.EventPush
	if p.Event == workflow.EventManual || p.Event == workflow.EventSchedule {
		kind = p.Event
	}
	planned := planRuns(parsed, workflow.Event{Kind: kind, Ref: p.Ref}, true, chosen)
	if len(planned) == 0 {
		return xerr(http.StatusConflict, api.ErrConflict, "the workflow files of those runs are not in %s at %s any more", workflow.Dir, p.SHA)
	}
	np, runs, err := s.createPipeline(ctx, repo, p.Ref, p.SHA, p.Event,
		trigger{actor: a.Handle, before: p.BeforeSHA, notes: notes, rerunOf: p.ID}, planned)
	if err != nil {
		return err
	}
	s.log.Info("runs re-run", "pipeline", np.ID, "rerun_of", p.ID, "run", in.Run, "by", a.Handle)
	return writeJSON(w, apiPipeline(np, runs))
}

// rerunSelection finds what in asks to run again, with the rules of
// MethodRerun: the pipeline, and its runs to run again.
func (s *Server) rerunSelection(ctx context.Context, a store.Account, in api.RerunInput) (store.Pipeline, []store.Run, error) {
	if in.Run != 0 {
		run, err := s.visibleRun(ctx, a, in.Run)
		if err != nil {
			return store.Pipeline{}, nil, err
		}
		if !api.IsFinal(run.State) {
			return store.Pipeline{}, nil, xerr(http.StatusConflict, api.ErrConflict,
				"run %d has not ended (%s): wait for its end or cancel it, then re-run it", run.ID, run.State)
		}
		p, err := s.store.Pipeline(ctx, run.PipelineID)
		return p, []store.Run{run}, err
	}
	noPipeline := xerr(http.StatusNotFound, api.ErrNotFound, "no pipeline %d", in.Pipeline)
	p, err := s.store.Pipeline(ctx, in.Pipeline)
	if errors.Is(err, store.ErrNotFound) {
		return p, nil, noPipeline
	}
	if err != nil {
		return p, nil, err
	}
	repo, err := s.store.RepoByID(ctx, p.RepoID)
	if err != nil {
		return p, nil, err
	}
	if !canManage(a, repo) {
		return p, nil, noPipeline
	}
	runs, err := s.store.RunsOfPipelines(ctx, []int64{p.ID})
	if err != nil {
		return p, nil, err
	}
	var again []store.Run
	for _, run := range runs {
		if !api.IsFinal(run.State) {
			return p, nil, xerr(http.StatusConflict, api.ErrConflict,
				"run %d of pipeline %d has not ended (%s): re-run the pipeline's failed runs once all have ended", run.ID, p.ID, run.State)
		}
		if run.State != api.StateSucceeded {
			again = append(again, run)
		}
	}
	if len(again) == 0 {
		return p, nil, xerr(http.StatusConflict, api.ErrConflict,
			"every run of pipeline %d succeeded: re-run one of them by its run id", p.ID)
	}
	return p, again, nil
}
