package server_test

import (
	"bytes"
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/server"
	"knotless.dev/knotless/internal/server/servertest"
	"knotless.dev/knotless/internal/svcauth"
	"knotless.dev/knotless/internal/testwait"
)

// claim asks for a run, waiting up to wait seconds.
func claim(t *testing.T, r *servertest.Runner, wait int) *api.ClaimedRun {
	t.Helper()
	var out api.ClaimOutput
	if err := r.Client.Procedure(context.Background(), api.MethodClaim, api.ClaimInput{Wait: wait}, &out); err != nil {
		t.Fatalf("claim by %s: %v", r.Name, err)
	}
	return out.Run
}

// withToken returns a client that sends exactly tok, and session when set.
func withToken(base, tok string, session ...string) *api.Client {
	return &api.Client{BaseURL: base, Auth: func(req *http.Request, _ string) error {
		req.Header.Set("Authorization", "Bearer "+tok)
		for _, s := range session {
			req.Header.Set(api.SessionHeader, s)
		}
		return nil
	}}
}

// queueOne pushes a workflow selected by any push and returns its queued
// run.
func queueOne(t *testing.T, f *fixture, extra string) api.Run {
	t.Helper()
	run := pushOne(t, f, extra)
	if run.State != api.StateQueued {
		t.Fatalf("run after push = %+v, want queued", run)
	}
	return run
}

// pushOne pushes a workflow selected by any push and returns its run, in
// whatever state a waiting runner left it.
func pushOne(t *testing.T, f *fixture, extra string) api.Run {
	t.Helper()
	dir := servertest.WorkTree(t, map[string]string{".knotless/workflows/any.yml": queuedWorkflow(extra)})
	f.push(t, dir, "main")
	runs := f.runs(t)
	if len(runs) != 1 {
		t.Fatalf("runs after push = %+v, want one", runs)
	}
	return runs[0]
}

func TestClaim_UnapprovedRunnerIsRefused(t *testing.T) {
	t.Parallel()
	f := newFixture(t, servertest.Options{})
	queueOne(t, f, "")
	r := f.RegisterRunner(t, f.repo, "r1", nil, false)
	err := r.Client.Procedure(context.Background(), api.MethodClaim, api.ClaimInput{}, nil)
	var e *api.Error
	if !api.IsError(err, api.ErrNotApproved) || !errorAs(err, &e) || e.Status != http.StatusForbidden {
		t.Fatalf("claim by a pending runner: err = %v, want 403 %s", err, api.ErrNotApproved)
	}
	var list api.ListRunnersOutput
	if err := f.alice().Query(context.Background(), api.MethodListRunners, map[string][]string{"repo": {f.repo}}, &list); err != nil {
		t.Fatal(err)
	}
	if len(list.Runners) != 1 || list.Runners[0].Status != api.RunnerPending || list.Runners[0].DID != r.DID {
		t.Fatalf("runners = %+v, want r1 pending", list.Runners)
	}
	err = r.Client.Procedure(context.Background(), api.MethodStartSession, api.StartSessionInput{}, nil)
	if !api.IsError(err, api.ErrNotApproved) {
		t.Fatalf("session of a pending runner: err = %v, want %s", err, api.ErrNotApproved)
	}
	if err := f.alice().Procedure(context.Background(), api.MethodApproveRunner, api.RunnerRef{Repo: f.repo, Name: "r1"}, nil); err != nil {
		t.Fatal(err)
	}
	r.StartSession(t)
	if got := claim(t, r, 0); got == nil {
		t.Fatal("approved runner got no run")
	}
}

func TestRunnerAuth_ExpiredWrongMethodAndReplayedTokensAreRefused(t *testing.T) {
	t.Parallel()
	f := newFixture(t, servertest.Options{})
	r := f.RegisterRunner(t, f.repo, "r1", nil, true)
	ctx := context.Background()

	expired := &svcauth.Signer{DID: r.DID, Audience: f.DID(), Key: r.Signer.Key, TTL: -time.Minute}
	tok, _ := expired.Token(api.MethodClaim)
	err := withToken(f.URL, tok).Procedure(ctx, api.MethodClaim, api.ClaimInput{}, nil)
	if !api.IsError(err, api.ErrExpiredToken) {
		t.Errorf("expired token: err = %v, want %s", err, api.ErrExpiredToken)
	}

	tok, _ = r.Signer.Token(api.MethodHeartbeat)
	err = withToken(f.URL, tok).Procedure(ctx, api.MethodClaim, api.ClaimInput{}, nil)
	if !api.IsError(err, api.ErrInvalidToken) {
		t.Errorf("token for another method: err = %v, want %s", err, api.ErrInvalidToken)
	}

	tok, _ = r.Signer.Token(api.MethodClaim)
	if err := withToken(f.URL, tok, r.Session()).Procedure(ctx, api.MethodClaim, api.ClaimInput{}, nil); err != nil {
		t.Fatalf("first use of a token: %v", err)
	}
	err = withToken(f.URL, tok, r.Session()).Procedure(ctx, api.MethodClaim, api.ClaimInput{}, nil)
	if !api.IsError(err, api.ErrInvalidToken) {
		t.Errorf("replayed token: err = %v, want %s", err, api.ErrInvalidToken)
	}

	other, _ := svcauth.GenerateKey()
	otherAud, _ := svcauth.DIDKey(other)
	wrongAud := &svcauth.Signer{DID: r.DID, Audience: otherAud, Key: r.Signer.Key}
	tok, _ = wrongAud.Token(api.MethodClaim)
	if err := withToken(f.URL, tok).Procedure(ctx, api.MethodClaim, api.ClaimInput{}, nil); !api.IsError(err, api.ErrInvalidToken) {
		t.Errorf("token for another server: err = %v, want %s", err, api.ErrInvalidToken)
	}
	// A key that was never registered.
	k, _ := svcauth.GenerateKey()
	did, _ := svcauth.DIDKey(k)
	unknown := &svcauth.Signer{DID: did, Audience: f.DID(), Key: k}
	tok, _ = unknown.Token(api.MethodClaim)
	if err := withToken(f.URL, tok).Procedure(ctx, api.MethodClaim, api.ClaimInput{}, nil); !api.IsError(err, api.ErrInvalidToken) {
		t.Errorf("unregistered runner: err = %v, want %s", err, api.ErrInvalidToken)
	}
}

func TestRegister_NameIsUniquePerRepoAndReRegisterIsIdempotent(t *testing.T) {
	t.Parallel()
	f := newFixture(t, servertest.Options{})
	ctx := context.Background()
	r := f.RegisterRunner(t, f.repo, "r1", []string{"linux"}, true)
	// Same key, same name: fine, status kept, labels updated.
	var again api.Runner
	reg := &api.Client{BaseURL: f.URL, Auth: servertest.RegistrationAuth(r.Signer.AuthFunc(), f.AdminToken)}
	if err := reg.Procedure(ctx, api.MethodRegisterRunner,
		api.RegisterRunnerInput{Repo: f.repo, Name: "r1", Labels: []string{"linux", "big"}}, &again); err != nil {
		t.Fatalf("re-register: %v", err)
	}
	if again.Status != api.RunnerApproved || len(again.Labels) != 2 {
		t.Errorf("re-registered runner = %+v, want approved with 2 labels", again)
	}
	// Another key, same name: conflict.
	k, _ := svcauth.GenerateKey()
	did, _ := svcauth.DIDKey(k)
	c := &api.Client{BaseURL: f.URL, Auth: servertest.RegistrationAuth((&svcauth.Signer{DID: did, Audience: f.DID(), Key: k}).AuthFunc(), f.AdminToken)}
	err := c.Procedure(ctx, api.MethodRegisterRunner, api.RegisterRunnerInput{Repo: f.repo, Name: "r1"}, nil)
	if !api.IsError(err, api.ErrConflict) {
		t.Errorf("another key under a taken name: err = %v, want Conflict", err)
	}
	// Registering with an account token is refused.
	err = f.alice().Procedure(ctx, api.MethodRegisterRunner, api.RegisterRunnerInput{Repo: f.repo, Name: "r2"}, nil)
	if !api.IsError(err, api.ErrAuthRequired) {
		t.Errorf("register with an account token: err = %v, want AuthenticationRequired", err)
	}
}

func TestClaim_RunnerOfAnotherRepositoryGetsNothing(t *testing.T) {
	t.Parallel()
	f := newFixture(t, servertest.Options{})
	ctx := context.Background()
	if err := f.alice().Procedure(ctx, api.MethodSetSecret, api.SetSecretInput{Repo: f.repo, Name: "TOKEN", Value: "s3cr3t-value"}, nil); err != nil {
		t.Fatal(err)
	}
	queueOne(t, f, "secrets: [TOKEN]\n")
	f.CreateRepo(t, f.token, "other")
	stranger := f.RegisterRunner(t, "alice/other", "r1", nil, true)
	if got := claim(t, stranger, 0); got != nil {
		t.Fatalf("runner of alice/other claimed run %d of %s", got.Run.ID, got.Run.Repo)
	}
	mine := f.RegisterRunner(t, f.repo, "r2", nil, true)
	got := claim(t, mine, 0)
	if got == nil || got.Secrets["TOKEN"] != "s3cr3t-value" {
		t.Fatalf("runner of %s: claimed %+v, want the run with secret TOKEN", f.repo, got)
	}
	// The stranger cannot touch the run either.
	err := stranger.Client.Procedure(ctx, api.MethodHeartbeat, api.HeartbeatInput{Run: got.Run.ID}, nil)
	if !api.IsError(err, api.ErrForbidden) {
		t.Errorf("heartbeat by another repository's runner: err = %v, want Forbidden", err)
	}
}

func TestClaim_SecretsScopedToOtherRunnerOrUnlistedAreNotSent(t *testing.T) {
	t.Parallel()
	f := newFixture(t, servertest.Options{})
	ctx := context.Background()
	set := func(name, value, runner string) {
		t.Helper()
		if err := f.alice().Procedure(ctx, api.MethodSetSecret,
			api.SetSecretInput{Repo: f.repo, Name: name, Value: value, Runner: runner}, nil); err != nil {
			t.Fatal(err)
		}
	}
	// Secrets may be scoped only to registered runners.
	a := f.RegisterRunner(t, f.repo, "runner-a", nil, true)
	b := f.RegisterRunner(t, f.repo, "runner-b", nil, true)
	set("DEPLOY", "deploy-for-everyone", "")
	set("DEPLOY", "deploy-for-a", "runner-a")
	set("ONLY_A", "only-a-value", "runner-a")
	set("UNLISTED", "unlisted-value", "")

	dir := servertest.WorkTree(t, map[string]string{
		".knotless/workflows/one.yml":  queuedWorkflow("secrets: [DEPLOY, ONLY_A]\n"),
		".knotless/workflows/two.yml":  queuedWorkflow("secrets: [DEPLOY, ONLY_A]\n"),
		".knotless/workflows/bare.yml": queuedWorkflow(""),
	})
	f.push(t, dir, "main")

	got := map[string]map[string]string{}
	for _, r := range []*servertest.Runner{a, b, a} {
		c := claim(t, r, 0)
		if c == nil {
			t.Fatalf("%s got no run", r.Name)
		}
		got[r.Name+" "+c.Run.WorkflowPath] = c.Secrets
	}
	for key, secrets := range got {
		if strings.HasSuffix(key, "bare.yml") {
			if len(secrets) != 0 {
				t.Errorf("%s: workflow listing no secrets received %v", key, keys(secrets))
			}
			continue
		}
		if _, ok := secrets["UNLISTED"]; ok {
			t.Errorf("%s: received UNLISTED, which the workflow does not list", key)
		}
		if strings.HasPrefix(key, "runner-a ") {
			if secrets["DEPLOY"] != "deploy-for-a" || secrets["ONLY_A"] != "only-a-value" {
				t.Errorf("%s: secrets %v; want runner-a's scoped values", key, keys(secrets))
			}
		} else {
			if secrets["DEPLOY"] != "deploy-for-everyone" {
				t.Errorf("%s: DEPLOY is not the unscoped value", key)
			}
			if _, ok := secrets["ONLY_A"]; ok {
				t.Errorf("%s: received ONLY_A, scoped to runner-a", key)
			}
		}
	}
}

func keys(m map[string]string) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

func TestSecrets_ListShowsNoValuesAndDatabaseHoldsNoPlaintext(t *testing.T) {
	t.Parallel()
	f := newFixture(t, servertest.Options{})
	ctx := context.Background()
	const value = "plaintext-canary-7f3a9c"
	f.RegisterRunner(t, f.repo, "r1", nil, false) // a pending runner may have scoped secrets
	if err := f.alice().Procedure(ctx, api.MethodSetSecret, api.SetSecretInput{Repo: f.repo, Name: "CANARY", Value: value}, nil); err != nil {
		t.Fatal(err)
	}
	if err := f.alice().Procedure(ctx, api.MethodSetSecret, api.SetSecretInput{Repo: f.repo, Name: "CANARY", Value: value, Runner: "r1"}, nil); err != nil {
		t.Fatal(err)
	}
	resp, err := f.alice().Do(ctx, http.MethodGet, api.MethodListSecrets, map[string][]string{"repo": {f.repo}}, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	body := readBody(t, resp)
	if strings.Contains(body, value) {
		t.Fatalf("secret list shows the value: %s", body)
	}
	if !strings.Contains(body, `"CANARY"`) || !strings.Contains(body, `"runner":"r1"`) {
		t.Errorf("secret list lacks the names and scopes: %s", body)
	}
	// Others may neither list nor set.
	bob := f.Client(f.CreateAccount(t, "bob"))
	if err := bob.Query(ctx, api.MethodListSecrets, map[string][]string{"repo": {f.repo}}, nil); !api.IsError(err, api.ErrNotFound) {
		t.Errorf("list by another account: err = %v, want NotFound", err)
	}
	f.Stop() // flush the WAL into the database file
	for _, name := range []string{server.DBFile, server.DBFile + "-wal"} {
		b, err := os.ReadFile(filepath.Join(f.DataDir, name))
		if err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		if bytes.Contains(b, []byte(value)) {
			t.Errorf("%s holds the plaintext secret", name)
		}
	}
	// Delete, then it is gone; deleting again is NotFound.
	f.Restart()
	if err := f.alice().Procedure(ctx, api.MethodDeleteSecret, api.DeleteSecretInput{Repo: f.repo, Name: "CANARY"}, nil); err != nil {
		t.Fatal(err)
	}
	if err := f.alice().Procedure(ctx, api.MethodDeleteSecret, api.DeleteSecretInput{Repo: f.repo, Name: "CANARY"}, nil); !api.IsError(err, api.ErrNotFound) {
		t.Errorf("second delete: err = %v, want NotFound", err)
	}
}

func TestClaim_TwoRunnersRacingForOneRunOneWins(t *testing.T) {
	t.Parallel()
	f := newFixture(t, servertest.Options{})
	runners := []*servertest.Runner{
		f.RegisterRunner(t, f.repo, "r1", nil, true),
		f.RegisterRunner(t, f.repo, "r2", nil, true),
	}
	// Both long-poll before the run exists; the push wakes both.
	var mu sync.Mutex
	var won []string
	var wg sync.WaitGroup
	for i := 0; i < server.DefaultMaxClaimsPerRunner; i++ {
		for _, r := range runners {
			wg.Add(1)
			go func() {
				defer wg.Done()
				var out api.ClaimOutput
				if err := r.Client.Procedure(context.Background(), api.MethodClaim, api.ClaimInput{Wait: 3}, &out); err != nil {
					t.Errorf("claim: %v", err)
					return
				}
				if out.Run != nil {
					mu.Lock()
					won = append(won, r.Name)
					mu.Unlock()
				}
			}()
		}
	}
	testwait.For(t, 3*time.Second, "every claim to wait", func() bool {
		return f.ClaimStats().Waiting == len(runners)*server.DefaultMaxClaimsPerRunner
	})
	run := pushOne(t, f, "")
	wg.Wait()
	if len(won) != 1 {
		t.Fatalf("%d claims won run %d (%v), want exactly 1", len(won), run.ID, won)
	}
	got := f.WaitRun(t, run.ID, 5*time.Second, func(r api.Run) bool { return r.State == api.StateClaimed })
	if got.Runner != won[0] {
		t.Errorf("run records runner %q, the winner was %q", got.Runner, won[0])
	}
}

func TestClaim_LongPollWakesWhenRunIsQueued(t *testing.T) {
	t.Parallel()
	f := newFixture(t, servertest.Options{})
	r := f.RegisterRunner(t, f.repo, "r1", nil, true)
	got := make(chan *api.ClaimedRun, 1)
	start := time.Now()
	go func() {
		var out api.ClaimOutput
		r.Client.Procedure(context.Background(), api.MethodClaim, api.ClaimInput{Wait: 50}, &out)
		got <- out.Run
	}()
	pushOne(t, f, "")
	select {
	case c := <-got:
		if c == nil {
			t.Fatal("long poll ended without a run")
		}
		if d := time.Since(start); d > 20*time.Second {
			t.Errorf("long poll took %s", d)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("long poll did not wake for the queued run")
	}
}

func TestClaim_RunnersListSelectsByNameOrLabels(t *testing.T) {
	t.Parallel()
	f := newFixture(t, servertest.Options{})
	queueOne(t, f, "runners: [linux, gpu]\n")
	plain := f.RegisterRunner(t, f.repo, "plain", []string{"linux"}, true)
	if c := claim(t, plain, 0); c != nil {
		t.Fatal("a runner lacking label gpu claimed a run that needs [linux, gpu]")
	}
	gpu := f.RegisterRunner(t, f.repo, "gpu", []string{"linux"}, true) // name counts as a label
	if c := claim(t, gpu, 0); c == nil {
		t.Fatal("runner named gpu with label linux got no run needing [linux, gpu]")
	}
}

func errorAs(err error, target **api.Error) bool {
	e, ok := err.(*api.Error)
	if ok {
		*target = e
	}
	return ok
}

func readBody(t *testing.T, resp *http.Response) string {
	t.Helper()
	defer resp.Body.Close()
	var b bytes.Buffer
	if _, err := b.ReadFrom(resp.Body); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

func TestRemoveRunner_RemovedRunnerCannotClaim(t *testing.T) {
	t.Parallel()
	f := newFixture(t, servertest.Options{})
	r := f.RegisterRunner(t, f.repo, "r1", nil, true)
	ctx := context.Background()
	bob := f.Client(f.CreateAccount(t, "bob"))
	if err := bob.Procedure(ctx, api.MethodRemoveRunner, api.RunnerRef{Repo: f.repo, Name: "r1"}, nil); !api.IsError(err, api.ErrNotFound) {
		t.Fatalf("remove by another account: err = %v, want NotFound", err)
	}
	if err := f.alice().Procedure(ctx, api.MethodRemoveRunner, api.RunnerRef{Repo: f.repo, Name: "r1"}, nil); err != nil {
		t.Fatal(err)
	}
	queueOne(t, f, "")
	if err := r.Client.Procedure(ctx, api.MethodClaim, api.ClaimInput{}, nil); !api.IsError(err, api.ErrInvalidToken) {
		t.Fatalf("claim by a removed runner: err = %v, want InvalidToken", err)
	}
	if err := f.alice().Procedure(ctx, api.MethodApproveRunner, api.RunnerRef{Repo: f.repo, Name: "r1"}, nil); !api.IsError(err, api.ErrNotFound) {
		t.Fatalf("approve of a removed runner: err = %v, want NotFound", err)
	}
}

// TestRemoveRunner_RunsItHeldEndAtOnceSayingSo pins issue 11 item 11:
// removing a runner mid-run used to leave the run running for the rest of
// its lease, then errored with "last heard from: never". Now its runs end
// at once, errored/runner-lost, with a message naming who removed it and
// when it was really last heard from.
func TestRemoveRunner_RunsItHeldEndAtOnceSayingSo(t *testing.T) {
	t.Parallel()
	f := newFixture(t, servertest.Options{Lease: time.Hour})
	r, c := claimedRun(t, f)
	procedure(t, r, api.MethodUpdateStep, api.UpdateStepInput{Run: c.Run.ID, Step: 1, Name: "build", State: api.StepRunning}, nil)
	if err := f.alice().Procedure(context.Background(), api.MethodRemoveRunner, api.RunnerRef{Repo: f.repo, Name: "r1"}, nil); err != nil {
		t.Fatal(err)
	}
	run := getRun(t, f, c.Run.ID)
	if run.State != api.StateErrored || run.Reason != api.ReasonRunnerLost {
		t.Fatalf("run after its runner was removed: %s/%s, want errored/runner-lost at once", run.State, run.Reason)
	}
	if !strings.Contains(run.Message, "removed by alice") || strings.Contains(run.Message, "last heard from: never") {
		t.Errorf("message %q: want who removed it and when it was last heard from", run.Message)
	}
	if got := stepsOf(run)[1]; got != "errored/runner-lost" {
		t.Errorf("the running step is %s, want errored/runner-lost", got)
	}
}

// TestClaim_ShellRunnerDoesNotClaimAServicesRun: a run whose workflow has
// services (images beside the job) is never given to a runner whose
// process said it runs the shell executor, which cannot run them; a
// docker runner of the same repository claims it.
func TestClaim_ShellRunnerDoesNotClaimAServicesRun(t *testing.T) {
	t.Parallel()
	f := newFixture(t, servertest.Options{})
	queueOne(t, f, "services: {db: {image: localhost/knotless/job-postgres:1}}\n")
	sh := f.RegisterRunner(t, f.repo, "sh", nil, true)
	sh.StartSessionAs(t, "shell")
	if got := claim(t, sh, 0); got != nil {
		t.Fatalf("the shell runner claimed run %d, whose workflow has services", got.Run.ID)
	}
	dk := f.RegisterRunner(t, f.repo, "dk", nil, true)
	dk.StartSessionAs(t, "docker")
	if got := claim(t, dk, 0); got == nil {
		t.Fatal("the docker runner claimed nothing: the services run should be its")
	}
}
