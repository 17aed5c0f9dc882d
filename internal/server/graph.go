package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/store"
	"knotless.dev/knotless/internal/workflow"
)

// A pipeline's graph: which workflows a trigger runs with what they need
// (selectWithNeeds, linkNeeds), what a run's end does to the others
// (followups: the store does it in the run's transaction, the server
// tells waiters and runners), and what a run gets of the runs it needs
// (claimedNeeds, getNeedOutputs).

// selectWithNeeds checks the needs of every parsed file (a file whose
// needs are wrong becomes an error of its own), and returns the paths of
// the files keep selects that match ev (all of them with all; and those
// that failed to parse), with every file they need, and each good file's
// needs resolved to paths.
func selectWithNeeds(parsed []parsedWorkflow, ev workflow.Event, all bool, keep func(pw parsedWorkflow) bool) (map[string]bool, map[string]map[string]string) {
	files := make([]workflow.PipelineFile, len(parsed))
	for i, pw := range parsed {
		files[i] = workflow.PipelineFile{Path: pw.Path, Runs: pw.Runs}
	}
	problems, resolved := workflow.CheckNeeds(files)
	var chosen []string
	for i := range parsed {
		pw := &parsed[i]
		if list := problems[pw.Path]; len(list) > 0 && pw.Err == nil {
			pw.Err, pw.WF, pw.Runs = list, nil, nil
			files[i].Runs = nil
		}
		if keep(*pw) && (pw.Err != nil || all || pw.WF.Matches(ev)) {
			chosen = append(chosen, pw.Path)
		}
	}
	selected := map[string]bool{}
	for _, p := range workflow.NeedsClosure(files, resolved, chosen) {
		selected[p] = true
	}
	return selected, resolved
}

// graphOf sets what the store keeps of wf's matrix, retry, services and
// timeout on nr.
func graphOf(nr *store.NewRun, wf *workflow.Workflow) {
	for _, v := range wf.Combo {
		nr.Matrix = append(nr.Matrix, api.MatrixValue{Name: v.Name, Value: v.Value})
	}
	if wf.Matrix != nil {
		nr.FailFast = wf.Matrix.FailFast
	}
	if wf.Retry != nil {
		nr.RetryMax, nr.RetryWhen = wf.Retry.Max, wf.Retry.When
	}
	nr.Timeout = wf.Timeout
	nr.Services = len(wf.Services)
}

// linkNeeds sets the Needs of each planned run: for each entry of its
// workflow's `needs:`, every run of the file it names (runs holds the
// indexes of each path's runs in out).
func linkNeeds(out []plannedRun, parsed []parsedWorkflow, resolved map[string]map[string]string, runs map[string][]int) {
	for _, pw := range parsed {
		if pw.WF == nil || len(runs[pw.Path]) == 0 {
			continue
		}
		var needs []store.NewNeed
		for _, n := range pw.WF.Needs {
			for _, i := range runs[resolved[pw.Path][n.Name]] {
				needs = append(needs, store.NewNeed{Index: i, Name: n.Name})
			}
		}
		for _, i := range runs[pw.Path] {
			out[i].Needs = needs
		}
	}
}

// apiGraph sets what a run's API form says of its place in the pipeline.
func apiGraph(out *api.Run, r store.Run) {
	out.Matrix, out.Attempt, out.RetryOf, out.RetriedBy = r.Matrix, r.Attempt, r.RetryOf, r.RetriedBy
}

// withNeeds fills the Needs of runs.
func (s *Server) withNeeds(ctx context.Context, runs []api.Run) error {
	if len(runs) == 0 {
		return nil
	}
	ids := make([]int64, len(runs))
	for i, r := range runs {
		ids[i] = r.ID
	}
	needs, err := s.store.Needs(ctx, ids)
	if err != nil {
		return err
	}
	for i := range runs {
		for _, n := range needs[runs[i].ID] {
			runs[i].Needs = append(runs[i].Needs, api.Need{Run: n.Run, Name: n.Name})
		}
	}
	return nil
}

// followups tells everyone what run's end did to the other runs of its
// pipeline (store.Run.Followups): the runs it ended are ended runs, a new
// attempt or a run that may now start is offered to waiting runners, and
// every changed run's watchers are woken.
func (s *Server) followups(ctx context.Context, run store.Run) {
	var queued []store.Run
	for _, f := range run.Followups {
		s.notify(runKey(f.ID))
		switch {
		case api.IsFinal(f.State):
			s.log.Info("run finished", "run", f.ID, "repo", f.Repo, "workflow", f.Workflow, "state", f.State,
				"reason", f.Reason, "message", f.Message)
			s.runEnded(ctx, f)
		case f.State == api.StateQueued:
			s.log.Info("run retried", "run", run.ID, "attempt", f.Attempt, "as", f.ID, "repo", f.Repo,
				"workflow", f.Workflow, "reason", run.Reason)
			queued = append(queued, f)
		default:
			s.log.Info("run cancel requested", "run", f.ID, "repo", f.Repo, "reason", api.ReasonFailFast)
		}
	}
	if run.State == api.StateSucceeded || len(queued) > 0 {
		// Runs that needed it, or its retry, may be claimable now.
		ready, err := s.store.QueuedRuns(context.WithoutCancel(ctx), run.RepoID)
		if err != nil {
			s.log.Warn("offer the runs a run's end let start", "run", run.ID, "err", err)
			return
		}
		s.offer(ready)
	}
}

// claimedNeeds is what a runner gets of the runs run needs: all of them
// succeeded (else the run was not claimable).
func (s *Server) claimedNeeds(ctx context.Context, run store.Run) ([]api.NeededRun, error) {
	needs, err := s.store.Needs(ctx, []int64{run.ID})
	if err != nil {
		return nil, err
	}
	var out []api.NeededRun
	for _, n := range needs[run.ID] {
		need, err := s.store.Run(ctx, n.Run)
		if err != nil {
			return nil, fmt.Errorf("read run %d, which run %d needs: %w", n.Run, run.ID, err)
		}
		nr := api.NeededRun{Run: need.ID, Name: n.Name, Workflow: need.Workflow, Matrix: need.Matrix, Exports: need.Exports}
		o, err := s.store.RunOutputs(ctx, need.ID)
		switch {
		case err == nil:
			nr.Outputs = apiOutputs(o)
		case !errors.Is(err, store.ErrNotFound):
			return nil, err
		}
		out = append(out, nr)
	}
	return out, nil
}

// getNeedOutputs serves a runner the outputs archive of a run that a run
// it holds needs.
func (s *Server) getNeedOutputs(w http.ResponseWriter, r *http.Request, x store.Runner) error {
	ctx := r.Context()
	id, err := requiredInt(r, "run")
	if err != nil {
		return err
	}
	needID, err := requiredInt(r, "need")
	if err != nil {
		return err
	}
	if _, err := s.heldRun(ctx, x, id); err != nil {
		return err
	}
	needs, err := s.store.Needs(ctx, []int64{id})
	if err != nil {
		return err
	}
	if !slices.ContainsFunc(needs[id], func(n store.Need) bool { return n.Run == needID }) {
		return xerr(http.StatusNotFound, api.ErrNotFound, "run %d does not need run %d", id, needID)
	}
	return s.serveOutputs(w, r, needID)
}

// environmentsRemoved records that a runner's next process removed every
// environment of its earlier ones but those it took over.
func (s *Server) environmentsRemoved(w http.ResponseWriter, r *http.Request, x store.Runner) error {
	var in api.EnvironmentsRemovedInput
	if err := decodeInput(r, &in); err != nil {
		return err
	}
	ready, err := s.store.EnvironmentsGone(r.Context(), x.ID, 0, in.Keep, s.now())
	if err != nil {
		return err
	}
	s.retriesReady(ready)
	return writeJSON(w, empty)
}

// retriesReady offers retries whose previous attempt's environment is
// now known gone.
func (s *Server) retriesReady(ready []store.Run) {
	for _, q := range ready {
		s.log.Info("retry may start: the environment of the attempt before is gone", "run", q.ID, "retry_of", q.RetryOf)
		s.notify(runKey(q.ID))
	}
	s.offer(ready)
}

// checkExports checks the values a runner says a run exported.
func checkExports(m map[string]string) error {
	if len(m) > api.MaxExports {
		return badRequest("exports: %d names, at most %d", len(m), api.MaxExports)
	}
	n := 0
	for k, v := range m {
		if !workflow.ValidEnvName(k) || len(k) > api.MaxExportNameLen {
			return badRequest("exports: %q is not a valid name", k)
		}
		if !workflow.ValidExportValue(v) {
			return badRequest("exports: the value of %s is not one line of UTF-8 text", k)
		}
		n += len(k) + len(v)
	}
	if n > api.MaxExportsBytes {
		return badRequest("exports: %d bytes, at most %d", n, api.MaxExportsBytes)
	}
	return nil
}

// waitingForGraph says why queued run r waits for the runs of its
// pipeline ("" when it does not): a need that has not succeeded yet, or
// the environment of its previous attempt.
func (s *Server) waitingForGraph(ctx context.Context, r store.Run, needs []store.Need, now time.Time) (string, error) {
	var waiting []string
	for _, n := range needs {
		need, err := s.store.Run(ctx, n.Run)
		if err != nil {
			return "", err
		}
		if need.State != api.StateSucceeded {
			waiting = append(waiting, fmt.Sprintf("%d (%s, %s)", need.ID, need.Workflow, need.State))
		}
	}
	if len(waiting) > 0 {
		return "waiting for the runs it needs to succeed: " + strings.Join(waiting, ", "), nil
	}
	if r.RetryOf == 0 {
		return "", nil
	}
	prev, err := s.store.Run(ctx, r.RetryOf)
	if err != nil {
		return "", err
	}
	switch {
	case prev.EnvGoneAt == nil:
		return fmt.Sprintf("attempt %d: waiting for the environment of run %d (attempt %d) to be removed", r.Attempt, prev.ID, prev.Attempt), nil
	case prev.EnvGoneAt.After(now):
		return fmt.Sprintf("attempt %d: waiting for the environment of run %d (attempt %d, %s) to be removed: its runner has not said so; it is gone by %s at the latest (the run's timeout past its start)",
			r.Attempt, prev.ID, prev.Attempt, prev.Reason, prev.EnvGoneAt.UTC().Format(time.RFC3339)), nil
	}
	return "", nil
}
