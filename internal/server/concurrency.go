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
	s.claims.offer(next)
}
