package server

import (
	"context"

	"knotless.dev/knotless/internal/store"
	"knotless.dev/knotless/internal/workflow"
)

// concurrencyOf sets nr's concurrency group from wf's `concurrency:` for
// the event ev (its ref, the workflow's name, the event's kind).
func concurrencyOf(nr *store.NewRun, wf *workflow.Workflow, ev workflow.Event) {
	if wf.Concurrency == nil {
		return
	}
	nr.ConcurrencyGroup = wf.Concurrency.GroupFor(ev.Ref, nr.Workflow, ev.Kind)
	nr.CancelInProgress = wf.Concurrency.CancelInProgress
}

// groupFreed wakes runners for the queued runs that run, now ended, held
// back in its concurrency group.
func (s *Server) groupFreed(ctx context.Context, run store.Run) {
	if run.ConcurrencyGroup == "" {
		return
	}
	queued, err := s.store.QueuedRuns(context.WithoutCancel(ctx), run.RepoID)
	if err != nil {
		s.log.Warn("wake runners for the next run of a concurrency group", "run", run.ID, "group", run.ConcurrencyGroup, "err", err)
		return
	}
	var next []store.Run
	for _, q := range queued {
		if q.ConcurrencyGroup == run.ConcurrencyGroup {
			next = append(next, q)
		}
	}
	s.offer(next)
}

// superseded logs the older runs that the new runs (planned, as created)
// cancelled under cancel-in-progress, wakes whoever follows them, and
// releases what the ended ones held. A running one ends when its runner
// hears of the cancel.
func (s *Server) superseded(ctx context.Context, repo store.Repo, planned []plannedRun, runs []store.Run) {
	for i, run := range runs {
		if !planned[i].CancelInProgress || run.ConcurrencyGroup == "" {
			continue
		}
		older, err := s.store.ListRuns(ctx, store.RunFilter{RepoID: repo.ID, Before: run.ID, Limit: 100})
		if err != nil {
			s.log.Warn("list the runs a new run superseded", "run", run.ID, "err", err)
			continue
		}
		for _, o := range older {
			if o.SupersededBy != run.ID {
				continue
			}
			s.log.Info("run superseded", "run", o.ID, "by", run.ID, "repo", repo.FullName(), "group", run.ConcurrencyGroup, "state", o.State)
			s.notify(runKey(o.ID))
			s.runEnded(ctx, o)
		}
	}
}
