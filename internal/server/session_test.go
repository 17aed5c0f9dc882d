package server_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/server/servertest"
)

// runnerCall makes one call of runner method nsid about run with c and
// returns its error; every runner method but register and startSession.
func runnerCall(c *api.Client, nsid string, run int64) error {
	ctx := context.Background()
	switch nsid {
	case api.MethodClaim:
		return c.Procedure(ctx, nsid, api.ClaimInput{}, nil)
	case api.MethodHeartbeat:
		return c.Procedure(ctx, nsid, api.HeartbeatInput{Run: run}, nil)
	case api.MethodUpdateStep:
		return c.Procedure(ctx, nsid, api.UpdateStepInput{Run: run, Step: 1, Name: "s", State: api.StepRunning}, nil)
	case api.MethodAppendLog:
		resp, err := c.Do(ctx, http.MethodPost, nsid, url.Values{"run": {itoa(run)}, "step": {"1"}, "offset": {"0"}},
			"application/octet-stream", strings.NewReader("x"))
		if err == nil {
			resp.Body.Close()
		}
		return err
	case api.MethodComplete:
		return c.Procedure(ctx, nsid, api.CompleteInput{Run: run, State: api.StateSucceeded}, nil)
	case api.MethodHandover:
		return c.Procedure(ctx, nsid, api.HandoverInput{Reason: "test"}, nil)
	case api.MethodResumeRun:
		return c.Procedure(ctx, nsid, api.RunRef{Run: run}, nil)
	}
	return fmt.Errorf("no call for %s", nsid)
}

// sessionMethods are the runner methods that need a session.
var sessionMethods = []string{api.MethodClaim, api.MethodHeartbeat, api.MethodUpdateStep, api.MethodAppendLog,
	api.MethodComplete, api.MethodHandover, api.MethodResumeRun}

// wantXRPC fails the test unless err is an *api.Error with status and name
// whose message holds every one of words.
func wantXRPC(t *testing.T, what string, err error, status int, name string, words ...string) {
	t.Helper()
	var e *api.Error
	if !errors.As(err, &e) || e.Status != status || e.Name != name {
		t.Errorf("%s: err = %v, want %d %s", what, err, status, name)
		return
	}
	for _, w := range words {
		if !strings.Contains(e.Message, w) {
			t.Errorf("%s: message %q lacks %q", what, e.Message, w)
		}
	}
}

func TestServer_SupersededSessionIsRefusedOnEveryRunnerMethod(t *testing.T) {
	t.Parallel()
	f := newFixture(t, servertest.Options{})
	r, c := claimedRun(t, f)
	old := r.Session()
	started := r.StartSession(t)
	if started.Session == old || started.Session == "" {
		t.Fatalf("new session %q, old %q: want a new one", started.Session, old)
	}
	for _, nsid := range sessionMethods {
		err := runnerCall(r.ClientWithSession(old), nsid, c.Run.ID)
		wantXRPC(t, nsid+" with a superseded session", err, http.StatusConflict, api.ErrSessionSuperseded,
			"a newer knotless-run process started", "same state file", "must stop")
		err = runnerCall(r.ClientWithSession(""), nsid, c.Run.ID)
		wantXRPC(t, nsid+" without a session", err, http.StatusBadRequest, api.ErrSessionRequired, "upgrade knotless-run")
		err = runnerCall(r.ClientWithSession("made-up"), nsid, c.Run.ID)
		wantXRPC(t, nsid+" with an unknown session", err, http.StatusConflict, api.ErrSessionSuperseded, "must stop")
	}
	// Nothing the refused calls said was taken; the new session works.
	if run := getRun(t, f, c.Run.ID); run.State != api.StateClaimed || len(run.Steps) != 0 {
		t.Fatalf("run after refused calls = %s with %d steps, want claimed with none", run.State, len(run.Steps))
	}
	procedure(t, r, api.MethodHeartbeat, api.HeartbeatInput{Run: c.Run.ID}, nil)
	procedure(t, r, api.MethodComplete, api.CompleteInput{Run: c.Run.ID, State: api.StateSucceeded}, nil)
}

func TestServer_LongPollingClaimOfASupersededSessionEndsAtOnce(t *testing.T) {
	t.Parallel()
	f := newFixture(t, servertest.Options{})
	r := f.RegisterRunner(t, f.repo, "r1", nil, true)
	old := r.ClientWithSession(r.Session())
	errc := make(chan error, 1)
	go func() { errc <- old.Procedure(context.Background(), api.MethodClaim, api.ClaimInput{Wait: 30}, nil) }()
	select {
	case err := <-errc: // nothing is queued: the claim must wait
		t.Fatalf("the claim answered before any new session: %v", err)
	case <-time.After(500 * time.Millisecond): // parked by now
	}
	r.StartSession(t)
	select {
	case err := <-errc:
		wantXRPC(t, "long-polling claim of a superseded session", err, http.StatusConflict, api.ErrSessionSuperseded, "must stop")
	case <-time.After(10 * time.Second):
		t.Fatal("the claim of the superseded session still waits 10 s after the new session started")
	}
}

func TestServer_StartSessionListsHeldRunsAndRenewsTheirLeases(t *testing.T) {
	t.Parallel()
	f := newFixture(t, servertest.Options{Lease: time.Second})
	dir := servertest.WorkTree(t, map[string]string{
		".knotless/workflows/a.yml": queuedWorkflow(""),
		".knotless/workflows/b.yml": queuedWorkflow(""),
		".knotless/workflows/c.yml": queuedWorkflow(""),
	})
	f.push(t, dir, "main")
	r := f.RegisterRunner(t, f.repo, "r1", nil, true)
	var claimed []*api.ClaimedRun
	for range 3 {
		c := claim(t, r, 0)
		if c == nil {
			t.Fatal("no run claimed")
		}
		claimed = append(claimed, c)
	}
	procedure(t, r, api.MethodUpdateStep, api.UpdateStepInput{Run: claimed[1].Run.ID, Step: 1, Name: "s", State: api.StepRunning}, nil)
	procedure(t, r, api.MethodComplete, api.CompleteInput{Run: claimed[2].Run.ID, State: api.StateSucceeded}, nil)
	if err := f.alice().Procedure(context.Background(), api.MethodCancelRun, api.RunRef{Run: claimed[1].Run.ID}, nil); err != nil {
		t.Fatal(err)
	}

	// Only sessions renew the leases, for three lease lengths: no run
	// ends runner-lost.
	for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		out := r.StartSession(t)
		if out.LeaseSeconds != 1 || out.HandoverGraceSeconds != int(5*time.Minute/time.Second) {
			t.Fatalf("LeaseSeconds %d HandoverGraceSeconds %d, want 1 and 300", out.LeaseSeconds, out.HandoverGraceSeconds)
		}
		want := []api.HeldRun{{Run: claimed[0].Run.ID, State: api.StateClaimed},
			{Run: claimed[1].Run.ID, State: api.StateRunning, CancelRequested: true}}
		if fmt.Sprint(out.Runs) != fmt.Sprint(want) {
			t.Fatalf("held runs = %+v, want %+v (oldest first, not the final one)", out.Runs, want)
		}
	}
	if run := getRun(t, f, claimed[0].Run.ID); run.State != api.StateClaimed {
		t.Fatalf("run renewed by sessions is %s/%s %q, want claimed", run.State, run.Reason, run.Message)
	}
	// Without sessions or heartbeats the lease lapses as before.
	run := f.WaitRun(t, claimed[0].Run.ID, 10*time.Second, func(r api.Run) bool { return api.IsFinal(r.State) })
	if run.Reason != api.ReasonRunnerLost || !strings.Contains(run.Message, "stopped renewing the lease") {
		t.Fatalf("run = %s/%s %q, want runner-lost", run.State, run.Reason, run.Message)
	}
}

// TestServer_RestartAfterKillTakesRunsOverAtOnce: a runner process killed
// with SIGKILL sends nothing more; its successor (same identity) starts a
// session and carries on with the runs at once, long before the lease
// could lapse, while the dead process's session is refused.
func TestServer_RestartAfterKillTakesRunsOverAtOnce(t *testing.T) {
	t.Parallel()
	f := newFixture(t, servertest.Options{Lease: time.Hour})
	r, c := claimedRun(t, f)
	procedure(t, r, api.MethodUpdateStep, api.UpdateStepInput{Run: c.Run.ID, Step: 1, Name: "build", State: api.StepRunning}, nil)
	killed := r.ClientWithSession(r.Session())

	out := r.StartSession(t) // the new process
	if len(out.Runs) != 1 || out.Runs[0].Run != c.Run.ID || out.Runs[0].State != api.StateRunning {
		t.Fatalf("held runs = %+v, want run %d running", out.Runs, c.Run.ID)
	}
	var resumed api.ClaimedRun
	procedure(t, r, api.MethodResumeRun, api.RunRef{Run: c.Run.ID}, &resumed)
	procedure(t, r, api.MethodHeartbeat, api.HeartbeatInput{Run: c.Run.ID}, nil)
	zero := 0
	procedure(t, r, api.MethodUpdateStep, api.UpdateStepInput{Run: c.Run.ID, Step: 1, State: api.StepSucceeded, ExitCode: &zero}, nil)
	procedure(t, r, api.MethodComplete, api.CompleteInput{Run: c.Run.ID, State: api.StateSucceeded, ExitCode: &zero}, nil)
	if run := getRun(t, f, c.Run.ID); run.State != api.StateSucceeded {
		t.Fatalf("run = %s/%s, want succeeded", run.State, run.Reason)
	}
	err := killed.Procedure(context.Background(), api.MethodHeartbeat, api.HeartbeatInput{Run: c.Run.ID}, nil)
	wantXRPC(t, "heartbeat of the killed process's session", err, http.StatusConflict, api.ErrSessionSuperseded)
}

func TestServer_HandoverExtendsLeasesToTheGraceThenRunsEndWithTheHandoverMessage(t *testing.T) {
	t.Parallel()
	f := newFixture(t, servertest.Options{Lease: time.Second, HandoverGrace: 3 * time.Second})
	r, c := claimedRun(t, f)
	handedOver := r.ClientWithSession(r.Session())
	var out api.HandoverOutput
	at := time.Now()
	procedure(t, r, api.MethodHandover, api.HandoverInput{Reason: "SIGTERM"}, &out)
	if len(out.Runs) != 1 || out.Runs[0] != c.Run.ID || out.GraceSeconds != 3 {
		t.Fatalf("handover = %+v, want run %d and 3 s of grace", out, c.Run.ID)
	}
	for _, nsid := range sessionMethods {
		err := runnerCall(handedOver, nsid, c.Run.ID)
		wantXRPC(t, nsid+" after handover", err, http.StatusConflict, api.ErrSessionSuperseded, "handed its runs over", "must stop")
	}
	run := f.WaitRun(t, c.Run.ID, 20*time.Second, func(r api.Run) bool { return api.IsFinal(r.State) })
	if run.State != api.StateErrored || run.Reason != api.ReasonRunnerLost ||
		!strings.Contains(run.Message, "handed the run over at") || !strings.Contains(run.Message, "no new runner process took it") {
		t.Fatalf("run = %s/%s %q; want errored/runner-lost saying it was handed over and not taken", run.State, run.Reason, run.Message)
	}
	// It lived the grace, not the lease (the sweeper's tick is at most 1 s).
	if lived := run.FinishedAt.Sub(at); lived < 2500*time.Millisecond {
		t.Fatalf("handed-over run ended %s after the handover, want the 3 s grace", lived)
	}
}

func TestServer_NewSessionWithinTheHandoverGraceTakesTheRuns(t *testing.T) {
	t.Parallel()
	f := newFixture(t, servertest.Options{Lease: time.Second, HandoverGrace: time.Hour})
	r, c := claimedRun(t, f)
	procedure(t, r, api.MethodHandover, api.HandoverInput{Reason: "upgrade"}, nil)
	// The owner sees that the runner is handing over, and until when.
	handingOver := func() *time.Time {
		var list api.ListRunnersOutput
		if err := f.alice().Query(context.Background(), api.MethodListRunners, url.Values{"repo": {f.repo}}, &list); err != nil || len(list.Runners) != 1 {
			t.Fatalf("runner list: %v %+v", err, list)
		}
		return list.Runners[0].HandoverUntil
	}
	if until := handingOver(); until == nil || time.Until(*until) < 50*time.Minute {
		t.Fatalf("runner list after a handover: handoverUntil %v, want about an hour ahead", until)
	}
	// A handover is final for its session: no second one.
	err := r.Client.Procedure(context.Background(), api.MethodHandover, api.HandoverInput{}, nil)
	wantXRPC(t, "second handover", err, http.StatusConflict, api.ErrSessionSuperseded, "handed its runs over")

	out := r.StartSession(t)
	if len(out.Runs) != 1 || out.Runs[0].Run != c.Run.ID {
		t.Fatalf("held runs after handover = %+v, want run %d", out.Runs, c.Run.ID)
	}
	if until := handingOver(); until != nil {
		t.Fatalf("runner list after a new session: still handing over until %v", until)
	}
	var resumed api.ClaimedRun
	procedure(t, r, api.MethodResumeRun, api.RunRef{Run: c.Run.ID}, &resumed)
	// Now the new session renews the lease (1 s): heartbeat for three.
	for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		procedure(t, r, api.MethodHeartbeat, api.HeartbeatInput{Run: c.Run.ID}, nil)
	}
	procedure(t, r, api.MethodComplete, api.CompleteInput{Run: c.Run.ID, State: api.StateSucceeded}, nil)
	if run := getRun(t, f, c.Run.ID); run.State != api.StateSucceeded {
		t.Fatalf("run = %s/%s %q, want succeeded", run.State, run.Reason, run.Message)
	}
}

func TestServer_ResumeRunRotatesTheTokenAndGivesWhatClaimGave(t *testing.T) {
	t.Parallel()
	f := newFixture(t, servertest.Options{})
	ctx := context.Background()
	r1 := f.RegisterRunner(t, f.repo, "r1", nil, true)
	r2 := f.RegisterRunner(t, f.repo, "r2", nil, true)
	for _, s := range []api.SetSecretInput{
		{Repo: f.repo, Name: "DEPLOY", Value: "deploy-for-everyone"},
		{Repo: f.repo, Name: "DEPLOY", Value: "deploy-for-r1", Runner: "r1"},
		{Repo: f.repo, Name: "ONLY_R2", Value: "only-r2", Runner: "r2"},
		{Repo: f.repo, Name: "UNLISTED", Value: "unlisted"},
	} {
		if err := f.alice().Procedure(ctx, api.MethodSetSecret, s, nil); err != nil {
			t.Fatal(err)
		}
	}
	queueOne(t, f, "secrets: [DEPLOY, ONLY_R2]\n")
	c := claim(t, r1, 0)
	if c == nil {
		t.Fatal("no run claimed")
	}
	var res api.ClaimedRun
	procedure(t, r1, api.MethodResumeRun, api.RunRef{Run: c.Run.ID}, &res)
	if res.RunToken == c.RunToken || !strings.HasPrefix(res.RunToken, "knr_") {
		t.Errorf("resumed run token %q: want a new knr_ token", res.RunToken)
	}
	if res.Run.ID != c.Run.ID || res.Run.SHA != c.Run.SHA || res.WorkflowSource != c.WorkflowSource ||
		res.GitURL != c.GitURL || res.LeaseSeconds != c.LeaseSeconds || res.CancelRequested {
		t.Errorf("resumed = %+v\nclaimed = %+v", res, c)
	}
	if fmt.Sprint(res.Secrets) != fmt.Sprint(c.Secrets) || res.Secrets["DEPLOY"] != "deploy-for-r1" || len(res.Secrets) != 1 {
		t.Errorf("resumed secrets %v, claimed %v; want only r1's DEPLOY", keys(res.Secrets), keys(c.Secrets))
	}
	// The new token fetches; the old one is refused at once.
	mirror := t.TempDir()
	servertest.Git(t, mirror, "init", "-q", "--bare")
	servertest.Git(t, mirror, "fetch", "-q", f.GitURL(f.repo, res.RunToken), c.Run.SHA)
	if out, err := servertest.GitErr(t, mirror, "fetch", "-q", f.GitURL(f.repo, c.RunToken), c.Run.SHA); err == nil {
		t.Fatalf("fetch with the replaced run token succeeded:\n%s", out)
	}

	if err := f.alice().Procedure(ctx, api.MethodCancelRun, api.RunRef{Run: c.Run.ID}, nil); err != nil {
		t.Fatal(err)
	}
	procedure(t, r1, api.MethodResumeRun, api.RunRef{Run: c.Run.ID}, &res)
	if !res.CancelRequested {
		t.Error("resumeRun after a cancel does not say cancelRequested")
	}
	err := r2.Client.Procedure(ctx, api.MethodResumeRun, api.RunRef{Run: c.Run.ID}, nil)
	wantXRPC(t, "resumeRun by another runner", err, http.StatusForbidden, api.ErrForbidden, "not held by runner r2")
	err = r1.Client.Procedure(ctx, api.MethodResumeRun, api.RunRef{Run: c.Run.ID + 100}, nil)
	wantXRPC(t, "resumeRun of an absent run", err, http.StatusNotFound, api.ErrNotFound)
	procedure(t, r1, api.MethodComplete, api.CompleteInput{Run: c.Run.ID, State: api.StateCancelled, Reason: api.ReasonCancelled}, nil)
	err = r1.Client.Procedure(ctx, api.MethodResumeRun, api.RunRef{Run: c.Run.ID}, nil)
	wantXRPC(t, "resumeRun of a final run", err, http.StatusConflict, api.ErrRunFinished, "already ended cancelled")
}
