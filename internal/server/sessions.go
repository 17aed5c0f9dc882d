package server

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"time"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/store"
)

// maxSessionNote caps the free-text fields of startSession and handover
// (they go to the log).
const maxSessionNote = 200

// newSessionID returns 16 random bytes in hex.
func newSessionID() (string, error) {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("make session id: %w", err)
	}
	return hex.EncodeToString(b), nil
}

// checkSession refuses a runner call unless session is x's open session:
// 400 SessionRequired when the call carries none (a knotless-run from
// before sessions), 409 SessionSuperseded when a newer session started or
// this one handed its runs over. The process that gets 409 must stop.
func checkSession(x store.Runner, session string) error {
	if session == "" {
		return xerr(http.StatusBadRequest, api.ErrSessionRequired,
			"runner calls need a session (the %s header, from %s): upgrade knotless-run", api.SessionHeader, api.MethodStartSession)
	}
	if x.SessionOpen(session) {
		return nil
	}
	switch {
	case session == x.Session: // handed over
		return xerr(http.StatusConflict, api.ErrSessionSuperseded,
			"this session of runner %s handed its runs over at %s: this process must stop; the next knotless-run process takes them",
			x.Name, stamp(x.HandedOverAt))
	case x.Session == "":
		return xerr(http.StatusConflict, api.ErrSessionSuperseded,
			"runner %s has no such session on this server (was its database restored?): this process must stop; start knotless-run again",
			x.Name)
	}
	return xerr(http.StatusConflict, api.ErrSessionSuperseded,
		"a newer knotless-run process started with this runner's identity (runner %s, same state file) at %s: this process must stop",
		x.Name, stamp(x.SessionStartedAt))
}

// stamp formats a stored time for a message.
func stamp(t *time.Time) string {
	if t == nil {
		return "an unknown time"
	}
	return t.UTC().Format(time.RFC3339)
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func (s *Server) graceSeconds() int {
	return max(int((s.cfg.HandoverGrace+time.Second-1)/time.Second), 1)
}

// maxFacts caps the facts of a StartSessionInput.
const maxFacts = 16

// checkSessionInput checks what a runner process says of itself: short,
// and shown as it is (api.CheckText).
func checkSessionInput(in api.StartSessionInput) error {
	if len(in.Version) > maxSessionNote || len(in.Executor) > maxSessionNote || len(in.Digest) > maxSessionNote {
		return badRequest("version, executor and digest take at most %d bytes", maxSessionNote)
	}
	if len(in.Facts) > maxFacts {
		return badRequest("at most %d facts", maxFacts)
	}
	if in.Capacity < 0 {
		return badRequest("capacity %d: want 0 or more", in.Capacity)
	}
	check := map[string]string{"version": in.Version, "executor": in.Executor, "digest": in.Digest}
	for k, v := range in.Facts {
		if len(k) > maxSessionNote || len(v) > maxSessionNote {
			return badRequest("a fact's name and value take at most %d bytes", maxSessionNote)
		}
		check["fact name "+api.VisibleText(k)] = k
		check["fact "+api.VisibleText(k)] = v
	}
	for what, v := range check {
		if err := api.CheckText(what, v); err != nil {
			return badRequest("%v", err)
		}
	}
	return nil
}

func (s *Server) startSession(w http.ResponseWriter, r *http.Request, x store.Runner) error {
	ctx := r.Context()
	var in api.StartSessionInput
	if err := decodeInput(r, &in); err != nil {
		return err
	}
	if err := checkSessionInput(in); err != nil {
		return err
	}
	id, err := newSessionID()
	if err != nil {
		return err
	}
	now := s.now()
	prev, held, err := s.store.StartSession(ctx, x.ID, id, now, now.Add(s.cfg.Lease))
	if err != nil {
		return err
	}
	s.notify(runnerKey(x.ID)) // ends the long polls of the old session
	s.recordRunnerProcess(ctx, x, in, now)
	out := api.StartSessionOutput{Session: id, Runs: []api.HeldRun{}, LeaseSeconds: s.leaseSeconds(),
		HandoverGraceSeconds: s.graceSeconds()}
	for _, run := range held {
		out.Runs = append(out.Runs, api.HeldRun{Run: run.ID, State: run.State, CancelRequested: run.CancelRequested})
	}
	s.log.Info("runner session started", "runner", x.Name, "repo", x.Repo, "executor", in.Executor, "version", in.Version,
		"superseded", yesNo(prev.Session != "" && prev.HandedOverAt == nil), "after_handover", yesNo(prev.HandedOverAt != nil),
		"held_runs", len(held))
	return writeJSON(w, out)
}

func (s *Server) handover(w http.ResponseWriter, r *http.Request, x store.Runner) error {
	ctx := r.Context()
	var in api.HandoverInput
	if err := decodeInput(r, &in); err != nil {
		return err
	}
	if len(in.Reason) > maxSessionNote {
		return badRequest("reason takes at most %d bytes", maxSessionNote)
	}
	session := r.Header.Get(api.SessionHeader)
	now := s.now()
	held, err := s.store.HandOver(ctx, x.ID, session, now, now.Add(s.cfg.HandoverGrace))
	if errors.Is(err, store.ErrConflict) {
		// Another call ended the session since authRunner looked.
		if fresh, ferr := s.store.RunnerByDID(ctx, x.DID); ferr == nil {
			if cerr := checkSession(fresh, session); cerr != nil {
				return cerr
			}
		}
	}
	if err != nil {
		return err
	}
	s.notify(runnerKey(x.ID))
	out := api.HandoverOutput{Runs: []int64{}, GraceSeconds: s.graceSeconds()}
	for _, run := range held {
		out.Runs = append(out.Runs, run.ID)
	}
	s.log.Info("runner handed its runs over", "runner", x.Name, "repo", x.Repo, "reason", in.Reason,
		"runs", len(held), "grace", s.cfg.HandoverGrace)
	return writeJSON(w, out)
}

func (s *Server) resumeRun(w http.ResponseWriter, r *http.Request, x store.Runner) error {
	ctx := r.Context()
	var in api.RunRef
	if err := decodeInput(r, &in); err != nil {
		return err
	}
	run, err := s.heldRun(ctx, x, in.Run)
	if err != nil {
		return err
	}
	if api.IsFinal(run.State) {
		return runFinished(run)
	}
	token, err := newToken(runTokenPrefix)
	if err != nil {
		return err
	}
	run, err = s.store.RotateRunToken(ctx, run.ID, x.ID, hashToken(token), s.now().Add(s.cfg.Lease))
	switch {
	case errors.Is(err, store.ErrRunFinished):
		return runFinished(run)
	case errors.Is(err, store.ErrConflict):
		return forbidden("run %d is not held by runner %s", in.Run, x.Name)
	case err != nil:
		return err
	}
	out, err := s.claimed(ctx, run, x, token)
	if err != nil {
		return fmt.Errorf("resume run %d: %w", run.ID, err)
	}
	out.CancelRequested = run.CancelRequested
	// The steps as recorded, with their log sizes: a runner that lost its
	// spool rebuilds it from them.
	if out.Run.Steps, err = s.runSteps(ctx, run.ID); err != nil {
		return fmt.Errorf("resume run %d: %w", run.ID, err)
	}
	s.log.Info("run resumed", "run", run.ID, "repo", run.Repo, "workflow", run.Workflow, "runner", x.Name,
		"state", run.State, "cancel_requested", run.CancelRequested, "secrets", len(out.Secrets)+len(out.SecretBytes))
	return writeJSON(w, out)
}
