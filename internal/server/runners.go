package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/bluesky-social/indigo/atproto/atcrypto"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/store"
	"knotless.dev/knotless/internal/svcauth"
)

func apiRunner(x store.Runner) api.Runner {
	labels := x.Labels
	if labels == nil {
		labels = []string{}
	}
	out := api.Runner{Repo: x.Repo, Name: x.Name, DID: x.DID, Labels: labels, Status: x.Status,
		CreatedAt: x.CreatedAt, LastSeenAt: x.LastSeenAt}
	if x.HandedOverAt != nil && x.HandoverUntil != nil && x.HandoverUntil.After(time.Now()) {
		out.HandoverUntil = x.HandoverUntil
	}
	return out
}

// maxRegisterBody caps registerRunner's input: a name, labels and a key.
const maxRegisterBody = 64 << 10

func (s *Server) registerRunner(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	// Every attempt counts, refused ones too: guessing tokens is bounded.
	if err := s.allowRegistration(w, r); err != nil {
		return err
	}
	tok, ok := bearer(r)
	if !ok || !isJWT(tok) {
		return xerr(http.StatusUnauthorized, api.ErrAuthRequired,
			"registering a runner takes a service-auth JWT signed by the runner's key")
	}
	// The key that must have signed the token: the one already registered
	// for this DID, else the one inside a did:key, else the one the body
	// gives. The token is checked before the body is read whenever the
	// header suffices (always for knotless-run, whose DIDs are did:keys):
	// a client without a valid token cannot make the server wait for a
	// body.
	var in api.RegisterRunnerInput
	var key atcrypto.PublicKey
	bodyRead, needBody, fromDIDKey := false, false, false
	lookup := func(ctx context.Context, did string) (atcrypto.PublicKey, error) {
		var err error
		if x, lerr := s.store.RunnerByDID(ctx, did); lerr == nil {
			key, err = parsePublicKey(x.PublicKey)
			return key, err
		}
		if strings.HasPrefix(did, "did:key:") {
			key, err = svcauth.DIDKeyLookup(ctx, did)
			fromDIDKey = err == nil
			return key, err
		}
		if !bodyRead {
			needBody = true
			return nil, errors.New("the key is in the body")
		}
		if in.PublicKey == "" {
			return nil, errors.New("publicKey is required for a DID that is not a did:key")
		}
		key, err = parsePublicKey(in.PublicKey)
		return key, err
	}
	did, err := s.verify(ctx, tok, api.MethodRegisterRunner, lookup)
	if needBody {
		if err := decodeInputLimit(r, &in, maxRegisterBody); err != nil {
			return err
		}
		bodyRead = true
		did, err = s.verify(ctx, tok, api.MethodRegisterRunner, lookup)
	}
	if err != nil {
		return err
	}
	if !bodyRead {
		if err := decodeInputLimit(r, &in, maxRegisterBody); err != nil {
			return err
		}
		if fromDIDKey && in.PublicKey != "" && in.PublicKey != key.Multibase() {
			return badRequest("publicKey does not match the did:key %s", did)
		}
	}
	if err := s.checkRegistration(&in); err != nil {
		return err
	}
	if err := api.CheckRepo(in.Repo); err != nil {
		return badRequest("%v", err)
	}
	// The credential is checked before anything about the repository is
	// told: without one, a missing repository looks like any other.
	repo, used, err := s.registrationGrant(ctx, r.Header.Get(api.RegistrationTokenHeader), in.Repo, did, in.Name)
	if err != nil {
		return err
	}
	registered := false
	if used != "" {
		defer func() {
			if !registered {
				if err := s.store.ReturnRegistrationToken(context.WithoutCancel(ctx), used); err != nil {
					s.log.Warn("give back a use of a registration token", "repo", repo.FullName(), "err", err)
				}
			}
		}()
	}
	labels := slices.Clone(in.Labels)
	slices.Sort(labels)
	labels = slices.Compact(labels)
	x, created, err := s.store.RegisterRunner(ctx, store.Runner{RepoID: repo.ID, Name: in.Name, DID: did,
		PublicKey: key.Multibase(), Labels: labels, CreatedAt: time.Now()}, s.cfg.MaxPendingRunners)
	if errors.Is(err, store.ErrConflict) {
		return s.registerConflict(ctx, did, repo, in.Name)
	}
	if errors.Is(err, store.ErrLimit) {
		return s.tooManyPending(repo.FullName())
	}
	if err != nil {
		return err
	}
	registered = true
	if created {
		s.log.Info("runner registered", "repo", x.Repo, "runner", x.Name, "did", x.DID, "labels", strings.Join(x.Labels, ","))
	}
	return writeJSON(w, apiRunner(x))
}

// registerConflict explains why registering did as runner name of repo
// conflicts: the key is registered elsewhere, or the name is taken.
func (s *Server) registerConflict(ctx context.Context, did string, repo store.Repo, name string) error {
	if other, err := s.store.RunnerByDID(ctx, did); err == nil {
		return xerr(http.StatusConflict, api.ErrConflict,
			"this key is already registered as runner %s of %s: log in with a new --state file (a new key) to register another name or repository",
			other.Name, other.Repo)
	}
	return xerr(http.StatusConflict, api.ErrConflict,
		"runner name %s is taken in %s by another key: choose another --name, or ask an owner to run knotless runner remove --repo %s %s",
		name, repo.FullName(), repo.FullName(), name)
}

func (s *Server) listRunners(w http.ResponseWriter, r *http.Request, a store.Account) error {
	repo, err := s.managedRepo(r.Context(), a, r.URL.Query().Get("repo"))
	if err != nil {
		return err
	}
	limit, err := s.pageLimit(r, defaultRunnerPage)
	if err != nil {
		return err
	}
	xs, err := s.store.ListRunners(r.Context(), repo.ID, r.URL.Query().Get("cursor"), limit)
	if err != nil {
		return err
	}
	out := api.ListRunnersOutput{Runners: []api.Runner{}}
	for _, x := range xs {
		out.Runners = append(out.Runners, apiRunner(x))
	}
	if len(xs) == limit {
		out.Cursor = xs[len(xs)-1].Name
	}
	return writeJSON(w, out)
}

// namedRunner resolves a RunnerRef the caller may manage; it returns the
// reference too.
func (s *Server) namedRunner(r *http.Request, a store.Account) (store.Runner, api.RunnerRef, error) {
	var in api.RunnerRef
	if err := decodeInput(r, &in); err != nil {
		return store.Runner{}, in, err
	}
	repo, err := s.managedRepo(r.Context(), a, in.Repo)
	if err != nil {
		return store.Runner{}, in, err
	}
	x, err := s.store.RunnerByName(r.Context(), repo.ID, in.Name)
	if errors.Is(err, store.ErrNotFound) {
		return x, in, xerr(http.StatusNotFound, api.ErrNotFound, "no runner %s registered for %s (knotless runner list --repo %s)",
			in.Name, repo.FullName(), repo.FullName())
	}
	return x, in, err
}

func (s *Server) approveRunner(w http.ResponseWriter, r *http.Request, a store.Account) error {
	x, in, err := s.namedRunner(r, a)
	if err != nil {
		return err
	}
	// The name alone may belong to whoever registered it first: with the
	// DID `knotless-run login` printed, approve only that registration.
	if in.DID != "" && in.DID != x.DID {
		return xerr(http.StatusConflict, api.ErrConflict,
			"runner %s of %s has DID %s, not %s: someone else registered this name; remove it (knotless runner remove --repo %s %s) and register again",
			x.Name, x.Repo, x.DID, in.DID, x.Repo, x.Name)
	}
	was := x.Status
	if x, err = s.store.ApproveRunner(r.Context(), x.ID); err != nil {
		return err
	}
	if was != api.RunnerApproved {
		s.log.Info("runner approved", "repo", x.Repo, "runner", x.Name, "did", x.DID, "by", a.Handle)
	}
	return writeJSON(w, apiRunner(x))
}

func (s *Server) removeRunner(w http.ResponseWriter, r *http.Request, a store.Account) error {
	x, _, err := s.namedRunner(r, a)
	if err != nil {
		return err
	}
	ended, err := s.store.RemoveRunner(context.WithoutCancel(r.Context()), x.ID, a.Handle, time.Now())
	if err != nil {
		return err
	}
	s.log.Info("runner removed", "repo", x.Repo, "runner", x.Name, "did", x.DID, "by", a.Handle, "runs_ended", len(ended))
	for _, run := range ended {
		s.log.Warn("run finished", "run", run.ID, "repo", run.Repo, "workflow", run.Workflow,
			"state", run.State, "reason", run.Reason, "runner", x.Name, "message", run.Message)
		s.runEnded(context.WithoutCancel(r.Context()), run)
		s.notify(runKey(run.ID))
	}
	// A claim or session of the removed runner waiting now answers at once.
	s.notify(runnerKey(x.ID))
	return writeJSON(w, empty)
}

// qualifies reports whether runner x may take a run: every entry of the
// workflow's `runners:` is x's name or one of its labels.
func qualifies(x store.Runner, run store.Run) bool {
	for _, want := range run.Runners {
		if want != x.Name && !slices.Contains(x.Labels, want) {
			return false
		}
	}
	return true
}

// runsImages reports whether a runner of executor name can run a
// workflow's services (images): every executor but shell ("" is a runner
// that did not say: an older one, given the benefit of the doubt).
func runsImages(name string) bool { return name != "shell" }

func (s *Server) claim(w http.ResponseWriter, r *http.Request, x store.Runner) error {
	ctx := r.Context()
	var in api.ClaimInput
	if err := decodeInput(r, &in); err != nil {
		return err
	}
	session := r.Header.Get(api.SessionHeader)
	wait := time.Duration(min(max(in.Wait, 0), 60)) * time.Second
	n := min(max(in.Max, 1), api.MaxClaimRuns) // no Max (0 or less): one run, in Run
	// Registered before the first look: a run queued after it wakes us.
	waiter, err := s.enterClaim(x)
	if err != nil {
		return err
	}
	defer s.claims.leave(waiter)
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	for {
		// A new session or a handover ends this one: answer at once.
		ended := s.hub.wait(runnerKey(x.ID))
		pending := s.claims.beforeLook(waiter)
		got, look, err := s.tryClaim(ctx, x, session, n)
		claimed := make([]int64, 0, len(got))
		for _, c := range got {
			claimed = append(claimed, c.Run.ID)
		}
		s.claims.afterLook(waiter, look.runner, look.queued, claimed, pending)
		if err != nil {
			return err
		}
		if len(got) > 0 {
			if in.Max <= 0 {
				return writeJSON(w, api.ClaimOutput{Run: got[0]})
			}
			return writeJSON(w, api.ClaimOutput{Runs: got})
		}
		if wait == 0 {
			return writeJSON(w, api.ClaimOutput{})
		}
		select {
		case <-waiter.wake:
		case <-ended:
		case <-deadline.C:
			return writeJSON(w, api.ClaimOutput{})
		case <-s.closing:
			return writeJSON(w, api.ClaimOutput{})
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// claimLook is what one tryClaim saw: the runner as stored (nil if it
// could not be read) and the runs queued in its repository.
type claimLook struct {
	runner *store.Runner
	queued []store.Run
}

// tryClaim claims up to n of the oldest queued runs of x's repository
// that x qualifies for, or returns none. Only the runner's open session
// claims.
func (s *Server) tryClaim(ctx context.Context, x store.Runner, session string, n int) (claimed []*api.ClaimedRun, look claimLook, err error) {
	start := time.Now()
	defer func() {
		if len(claimed) > 0 {
			s.metrics.claimLatency.Observe(time.Since(start).Seconds())
		}
	}()
	if ctx.Err() != nil {
		return nil, look, ctx.Err()
	}
	// The runner may have been removed while it waited.
	x, err = s.store.RunnerByDID(ctx, x.DID)
	if errors.Is(err, store.ErrNotFound) {
		return nil, look, xerr(http.StatusUnauthorized, api.ErrInvalidToken,
			"runner %s of %s was removed: register again (knotless-run login) and have an owner approve it", x.Name, x.Repo)
	}
	if err != nil {
		return nil, look, err
	}
	look.runner = &x
	if x.Status != api.RunnerApproved {
		return nil, look, xerr(http.StatusForbidden, api.ErrNotApproved,
			"runner %s of %s is no longer approved: an owner approves it with: knotless runner approve --repo %s %s", x.Name, x.Repo, x.Repo, x.Name)
	}
	if err := checkSession(x, session); err != nil {
		return nil, look, err // superseded while it long-polled
	}
	queued, err := s.store.QueuedRuns(ctx, x.RepoID)
	if err != nil {
		return nil, look, err
	}
	look.queued = queued
	out, err := s.claimFirst(ctx, x, session, queued, n)
	return out, look, err
}

// claimAnswerBytes bounds the workflow sources and secrets of one claim
// answer of several runs: once the runs claimed hold this many bytes, the
// answer claims no more (it always holds one run, and runs stay at most
// 1 MiB of source each).
const claimAnswerBytes = 4 << 20

// claimFirst claims the first n runs of queued x qualifies for and can
// get, one at a time, each as a claim of its own (store.ClaimRun: its own
// lease, the session fence, the group and needs checked anew, so a run
// held back by one claimed just before is not taken). A run with services
// goes only to a runner whose executor runs images: not to one whose
// latest process said it runs the shell executor. An error after some
// runs were claimed ends the answer with those (they are the runner's
// now); an error before, with the error.
func (s *Server) claimFirst(ctx context.Context, x store.Runner, session string, queued []store.Run, n int) ([]*api.ClaimedRun, error) {
	var claimed []*api.ClaimedRun
	var executorName *string // read once, when a run has services
	executor := func() (string, error) {
		if executorName == nil {
			procs, err := s.store.RunnerProcesses(ctx, x.RepoID)
			if err != nil {
				return "", err
			}
			name := procs[x.ID].Executor
			executorName = &name
		}
		return *executorName, nil
	}
	size := 0
	for _, run := range queued {
		if len(claimed) >= n || size >= claimAnswerBytes || (len(claimed) > 0 && ctx.Err() != nil) {
			break // enough, or the runner went away: claim no more for it
		}
		out, err := s.claimOne(ctx, x, session, run, executor)
		if err != nil {
			if len(claimed) == 0 {
				return nil, err
			}
			if ctx.Err() == nil {
				s.log.Error("claim of several ends early", "runner", x.Name, "repo", x.Repo, "runs", len(claimed), "err", err)
			}
			break
		}
		if out != nil {
			claimed = append(claimed, out)
			size += len(out.WorkflowSource)
			for _, v := range out.Secrets {
				size += len(v)
			}
			for _, v := range out.SecretBytes {
				size += len(v)
			}
		}
	}
	return claimed, nil
}

// claimOne claims run for x if x qualifies for it and can get it; nil
// when not (another runner was faster, the run is held back, or x cannot
// run it). executor names the executor of x's latest process.
func (s *Server) claimOne(ctx context.Context, x store.Runner, session string, run store.Run, executor func() (string, error)) (*api.ClaimedRun, error) {
	if !qualifies(x, run) {
		return nil, nil
	}
	if run.Services > 0 {
		name, err := executor()
		if err != nil {
			return nil, err
		}
		if !runsImages(name) {
			return nil, nil
		}
	}
	token, err := newToken(runTokenPrefix)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	run, err = s.store.ClaimRun(ctx, run.ID, store.Claim{RunnerID: x.ID, RunnerName: x.Name, Session: session,
		TokenHash: hashToken(token), Now: now, LeaseUntil: now.Add(s.cfg.Lease)})
	if errors.Is(err, store.ErrConflict) {
		return nil, nil // another runner was faster (or the session just ended: the next look says so)
	}
	if err != nil {
		return nil, err
	}
	s.touchRunner(ctx, x.ID)
	s.notify(runKey(run.ID))
	if run.ClaimedAt != nil {
		s.metrics.queueWait.Observe(run.ClaimedAt.Sub(run.CreatedAt).Seconds())
	}
	out, err := s.claimed(ctx, run, x, token)
	if err != nil {
		// The runner will never see this run: end it so nobody waits.
		msg := fmt.Sprintf("server could not hand the run to runner %s: %v", x.Name, err)
		if ended, cerr := s.store.CompleteRun(context.WithoutCancel(ctx), run.ID, store.RunFinal{
			State: api.StateErrored, Reason: api.ReasonExecutor, Message: msg, At: time.Now(), EnvironmentRemoved: true}); cerr != nil {
			s.log.Error("end unclaimable run", "run", run.ID, "err", cerr)
		} else {
			s.runEnded(context.WithoutCancel(ctx), ended)
		}
		s.notify(runKey(run.ID))
		return nil, fmt.Errorf("claim run %d: %w", run.ID, err)
	}
	s.log.Info("run claimed", "run", run.ID, "repo", run.Repo, "workflow", run.Workflow,
		"runner", x.Name, "secrets", len(out.Secrets)+len(out.SecretBytes))
	return out, nil
}

// claimed assembles what the runner needs for a run it just claimed.
func (s *Server) claimed(ctx context.Context, run store.Run, x store.Runner, token string) (*api.ClaimedRun, error) {
	src, err := s.store.RunSource(ctx, run.ID)
	if err != nil {
		return nil, err
	}
	secrets, err := s.runSecrets(ctx, run, x)
	if err != nil {
		return nil, err
	}
	strs, raw := api.NewClaimedSecrets(secrets)
	needs, err := s.claimedNeeds(ctx, run)
	if err != nil {
		return nil, err
	}
	owner, name, _ := strings.Cut(run.Repo, "/")
	return &api.ClaimedRun{
		Needs:          needs,
		Run:            apiRun(run, nil),
		WorkflowSource: src,
		GitURL:         "/" + owner + "/" + name + ".git",
		RunToken:       token,
		Secrets:        strs,
		SecretBytes:    raw,
		LeaseSeconds:   s.leaseSeconds(),
	}, nil
}

func (s *Server) leaseSeconds() int {
	return max(int((s.cfg.Lease+time.Second-1)/time.Second), 1)
}

// heldRun loads a run and checks that runner x claimed it.
func (s *Server) heldRun(ctx context.Context, x store.Runner, id int64) (store.Run, error) {
	if id <= 0 {
		return store.Run{}, badRequest("run is required")
	}
	run, err := s.store.Run(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return run, xerr(http.StatusNotFound, api.ErrNotFound, "no run %d", id)
	}
	if err != nil {
		return run, err
	}
	if run.RunnerID != x.ID || run.RepoID != x.RepoID {
		return run, forbidden("run %d is not held by runner %s", id, x.Name)
	}
	return run, nil
}

func (s *Server) heartbeat(w http.ResponseWriter, r *http.Request, x store.Runner) error {
	var in api.HeartbeatInput
	if err := decodeInput(r, &in); err != nil {
		return err
	}
	if _, err := s.heldRun(r.Context(), x, in.Run); err != nil {
		return err
	}
	run, err := s.store.RenewLease(r.Context(), in.Run, x.ID, time.Now().Add(s.cfg.Lease))
	if errors.Is(err, store.ErrRunFinished) {
		return runFinished(run)
	}
	if errors.Is(err, store.ErrConflict) {
		return forbidden("run %d is not held by runner %s", in.Run, x.Name)
	}
	if err != nil {
		return err
	}
	return writeJSON(w, api.HeartbeatOutput{Cancel: run.CancelRequested, LeaseSeconds: s.leaseSeconds()})
}

func validStepState(st string) bool {
	return st == api.StepPending || st == api.StepRunning || api.StepIsFinal(st)
}

func (s *Server) updateStep(w http.ResponseWriter, r *http.Request, x store.Runner) error {
	var in api.UpdateStepInput
	if err := decodeInput(r, &in); err != nil {
		return err
	}
	if err := s.checkStep(int64(in.Step)); err != nil {
		return err
	}
	if !validStepState(in.State) {
		return badRequest("step state %q: want pending, running, succeeded, failed, skipped or cancelled", in.State)
	}
	before, err := s.heldRun(r.Context(), x, in.Run)
	if err != nil {
		return err
	}
	now := time.Now()
	// The step's name comes from the workflow the server parsed, where a
	// name that cannot be shown honestly was refused (api.CheckText); one
	// a runner sends anyway is kept escaped, not refused, so that the
	// run's journal is never stuck on it.
	run, err := s.store.UpdateStep(r.Context(), in.Run, store.Step{Index: in.Step, Name: api.VisibleText(cut(in.Name, maxStepName)), State: in.State,
		ExitCode: in.ExitCode, Reason: cut(in.Reason, maxReason), UpdatedAt: now, At: stepTime(in.At, now)})
	if err != nil {
		return err
	}
	if before.State == api.StateClaimed && run.State == api.StateRunning {
		s.log.Info("run started", "run", run.ID, "repo", run.Repo, "workflow", run.Workflow, "runner", x.Name)
	}
	if validStepState(in.State) && in.State != api.StepPending && in.State != api.StepRunning && in.State != api.StepSkipped {
		s.observeStep(r.Context(), in.Run, in.Step)
	}
	s.notify(runKey(run.ID))
	return writeJSON(w, empty)
}

// stepTime is the time a runner says a step changed (UpdateStepInput.At),
// no later than now (a runner's clock ahead of the server's) and no
// earlier than a day before it (a clock far behind); nil means now.
func stepTime(at *time.Time, now time.Time) time.Time {
	if at == nil || at.After(now) || at.Before(now.Add(-24*time.Hour)) {
		return now
	}
	return *at
}

// maxLogChunk caps one appendLog body.
const maxLogChunk = 8 << 20

func (s *Server) complete(w http.ResponseWriter, r *http.Request, x store.Runner) error {
	var in api.CompleteInput
	if err := decodeInput(r, &in); err != nil {
		return err
	}
	if !api.IsFinal(in.State) || in.State == api.StateSkipped {
		return badRequest("state %q is not a final state a runner reports: want succeeded, failed, cancelled or errored", in.State)
	}
	if err := checkExports(in.Exports); err != nil {
		return err
	}
	before, err := s.heldRun(r.Context(), x, in.Run)
	if err != nil {
		return err
	}
	s.recordCacheUsage(r.Context(), before, in.Caches)
	run, err := s.store.CompleteRun(r.Context(), in.Run, store.RunFinal{State: in.State, Reason: cut(in.Reason, maxReason),
		Message: cut(in.Message, maxMessage), ExitCode: in.ExitCode, At: time.Now(),
		Exports: in.Exports, EnvironmentRemoved: in.EnvironmentRemoved})
	if errors.Is(err, store.ErrRunFinished) {
		if in.EnvironmentRemoved {
			// The server ended it first (runner-lost): its retry waits
			// for this word.
			ready, gerr := s.store.EnvironmentsGone(context.WithoutCancel(r.Context()), x.ID, in.Run, nil, time.Now())
			if gerr != nil {
				s.log.Warn("record a run's environment removed", "run", in.Run, "err", gerr)
			}
			s.retriesReady(ready)
		}
		return runFinished(run)
	}
	if err != nil {
		return err
	}
	if !api.IsFinal(before.State) {
		s.log.Info("run finished", "run", run.ID, "repo", run.Repo, "workflow", run.Workflow,
			"state", run.State, "reason", run.Reason, "runner", x.Name)
		s.runEnded(r.Context(), run)
	}
	// A runner sends its result after the outputs: an upload it gave up
	// on is not coming back.
	s.outputs.dropParts(in.Run)
	s.notify(runKey(run.ID))
	return writeJSON(w, empty)
}
