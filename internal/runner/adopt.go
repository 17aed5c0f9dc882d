package runner

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/executor"
	"knotless.dev/knotless/internal/logship"
)

// A runner whose work directory did not survive its predecessor (a
// Kubernetes runner pod replaced by a rollout restart, an upgrade or an
// eviction, its work directory an emptyDir) finds no spool for the runs
// the server says it holds. With an executor that can find a run's
// environment by its ID (executor.Finder: kube finds the job pod by its
// labels), it rebuilds each such run's spool from what the server
// recorded (api.MethodResumeRun: the claim and every step's state and log
// size) and the environment's handle, and takes the run over like any
// other (takeover.go): the running step's output is read again from its
// first byte and masked again, which gives the very bytes the server
// holds, and only what lies past the server's size is sent. Nothing is
// lost or doubled, and what the predecessor spooled but had not delivered
// is made again from the step agent's output files.

// adoptWithoutSpool rebuilds the spool of held run h from the server's
// record and the executor's environment, for recoverSpools to take over.
// It reports false when it cannot (a step started and the executor is no
// Finder, the server or the executor cannot be asked): the caller then
// ends the run. A run none of whose steps started is set up again with
// any executor (a predecessor stopped between its claim and its first
// record of it). A run
// whose environment is gone although one of its steps started ends with
// the executor's reason (pod-lost for kube), recorded in the spool; a run
// whose steps had not started is set up again.
func (r *Runner) adoptWithoutSpool(ctx context.Context, h api.HeldRun) bool {
	if h.CancelRequested {
		return false
	}
	log := r.log.With("run", h.Run)
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	cr, err := r.client.ResumeRun(cctx, h.Run)
	if err != nil {
		log.Warn("cannot ask the server about a run this work directory knows nothing of", "err", err)
		return false
	}
	started := false
	for _, st := range cr.Run.Steps {
		started = started || (st.Index > api.SetupStep && st.State != api.StepPending)
	}
	var handle executor.Handle
	found := false
	if finder, ok := r.cfg.Executor.(executor.Finder); ok {
		id := "run-" + strconv.FormatInt(h.Run, 10)
		handle, found, err = finder.Find(cctx, id)
		if err != nil {
			log.Warn("cannot look for the environment of a run this work directory knows nothing of", "err", err)
			return false
		}
	} else if started {
		// Its environment cannot be found by the run alone: a step
		// that ran there is out of reach.
		return false
	}
	// Else no step started: the run is set up again (the predecessor
	// stopped between its claim and its first record of it, say; the
	// sweep removes what it may have begun).
	sp, err := logship.CreateSpool(r.path("spool"), h.Run)
	if err != nil {
		log.Error("rebuild the spool of a run", "err", err)
		return false
	}
	defer sp.Close()
	if !found && started {
		res := Result{State: api.StateErrored, Reason: api.ReasonPodLost,
			Message: "the runner's work directory was lost and the run's environment is gone: nothing is left to take over"}
		if err := (SpoolReporter{Spool: sp}).Done(res); err != nil {
			log.Error("record the end of a run whose environment is gone", "err", err)
		}
		log.Warn("a run this runner holds has no environment any more: ending it", "reason", res.Reason)
		return true
	}
	claimed := time.Now()
	if cr.Run.StartedAt != nil {
		claimed = *cr.Run.StartedAt
	}
	run := cr.Run
	steps := run.Steps
	run.Steps = nil
	entries := []logship.JournalEntry{{Claim: &logship.ClaimRecord{Run: run, WorkflowSource: cr.WorkflowSource, GitURL: cr.GitURL, Started: claimed}}}
	// A run still in setup starts it over (a new checkout, a new
	// environment; the old one is swept): its environment may lack the
	// checkout, which is not on this host.
	if found && started {
		data, err := json.Marshal(handle)
		if err != nil {
			log.Error("record the environment's handle", "err", err)
			return false
		}
		entries = append(entries, logship.JournalEntry{Session: data})
	}
	logs := map[int]int64{}
	for _, st := range steps {
		if st.LogSize > 0 {
			logs[st.Index] = st.LogSize
		}
		if st.State == api.StepPending {
			continue
		}
		entries = append(entries, logship.JournalEntry{Step: &api.UpdateStepInput{Run: h.Run, Step: st.Index, Name: st.Name,
			State: st.State, ExitCode: st.ExitCode, Reason: st.Reason}})
	}
	for _, e := range entries {
		if err := sp.Append(e); err != nil {
			log.Error("rebuild the spool of a run", "err", err)
			return false
		}
	}
	if err := sp.Delivered(logs); err != nil {
		log.Error("rebuild the spool of a run", "err", err)
		return false
	}
	log.Info("rebuilt the record of a run from the server's (this work directory had none): taking it over",
		"environment_found", found, "steps", len(steps), "handle", fmt.Sprintf("%s/%s", handle.Executor, handle.ID))
	return true
}
