package server_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/server/servertest"
	"knotless.dev/knotless/internal/svcauth"
)

// wantError fails unless err is an *api.Error with status, name and
// exactly message.
func wantError(t *testing.T, what string, err error, status int, name, message string) {
	t.Helper()
	var e *api.Error
	if !errorAs(err, &e) || e.Status != status || e.Name != name || e.Message != message {
		t.Errorf("%s:\n got %v\nwant %d %s: %s", what, err, status, name, message)
	}
}

func TestSetSecret_ScopeToUnregisteredRunnerIsNotFound(t *testing.T) {
	t.Parallel()
	f := newFixture(t, servertest.Options{})
	ctx := context.Background()
	err := f.alice().Procedure(ctx, api.MethodSetSecret,
		api.SetSecretInput{Repo: f.repo, Name: "DEPLOY", Value: "v", Runner: "nosuch"}, nil)
	wantError(t, "secret scoped to a runner name nobody registered", err, http.StatusNotFound, api.ErrNotFound,
		"no runner nosuch registered for alice/app (knotless runner list --repo alice/app)")
	var list api.ListSecretsOutput
	if err := f.alice().Query(ctx, api.MethodListSecrets, map[string][]string{"repo": {f.repo}}, &list); err != nil {
		t.Fatal(err)
	}
	if len(list.Secrets) != 0 {
		t.Errorf("secrets after the refused set: %+v, want none", list.Secrets)
	}
	// A runner of another repository does not count; a pending one here does.
	f.CreateRepo(t, f.token, "other")
	f.RegisterRunner(t, "alice/other", "elsewhere", nil, true)
	err = f.alice().Procedure(ctx, api.MethodSetSecret,
		api.SetSecretInput{Repo: f.repo, Name: "DEPLOY", Value: "v", Runner: "elsewhere"}, nil)
	if !api.IsError(err, api.ErrNotFound) {
		t.Errorf("secret scoped to a runner of another repository: err = %v, want NotFound", err)
	}
	f.RegisterRunner(t, f.repo, "builder-1", nil, false)
	if err := f.alice().Procedure(ctx, api.MethodSetSecret,
		api.SetSecretInput{Repo: f.repo, Name: "DEPLOY", Value: "v", Runner: "builder-1"}, nil); err != nil {
		t.Errorf("secret scoped to a pending runner of the repository: %v", err)
	}
}

func TestApproveRunner_DIDOfSomeoneElsesRegistrationIsConflict(t *testing.T) {
	t.Parallel()
	f := newFixture(t, servertest.Options{})
	ctx := context.Background()
	squatter := f.RegisterRunner(t, f.repo, "builder-1", nil, false)
	k, _ := svcauth.GenerateKey()
	mine, _ := svcauth.DIDKey(k)
	err := f.alice().Procedure(ctx, api.MethodApproveRunner, api.RunnerRef{Repo: f.repo, Name: "builder-1", DID: mine}, nil)
	wantError(t, "approve naming a DID that is not the registered one", err, http.StatusConflict, api.ErrConflict,
		"runner builder-1 of alice/app has DID "+squatter.DID+", not "+mine+
			": someone else registered this name; remove it (knotless runner remove --repo alice/app builder-1) and register again")
	var list api.ListRunnersOutput
	if err := f.alice().Query(ctx, api.MethodListRunners, map[string][]string{"repo": {f.repo}}, &list); err != nil {
		t.Fatal(err)
	}
	if len(list.Runners) != 1 || list.Runners[0].Status != api.RunnerPending {
		t.Fatalf("runners after the refused approve: %+v, want builder-1 still pending", list.Runners)
	}
	var x api.Runner
	if err := f.alice().Procedure(ctx, api.MethodApproveRunner, api.RunnerRef{Repo: f.repo, Name: "builder-1", DID: squatter.DID}, &x); err != nil {
		t.Fatalf("approve with the registered DID: %v", err)
	}
	if x.Status != api.RunnerApproved {
		t.Errorf("approved runner = %+v", x)
	}
}

func TestErrors_ServerMessagesDoNotEndInAGenericWord(t *testing.T) {
	t.Parallel()
	f := newFixture(t, servertest.Options{})
	ctx := context.Background()
	check := func(what string, err error, status int, name, message string) {
		t.Helper()
		wantError(t, what, err, status, name, message)
		for _, generic := range []string{": conflict", ": not found", ": run already finished", ": not allowed"} {
			if err != nil && strings.HasSuffix(err.Error(), generic) {
				t.Errorf("%s: message ends in %q: %v", what, generic, err)
			}
		}
	}
	r := f.RegisterRunner(t, f.repo, "builder-1", nil, true)

	k, _ := svcauth.GenerateKey()
	did, _ := svcauth.DIDKey(k)
	other := &api.Client{BaseURL: f.URL, Auth: servertest.RegistrationAuth((&svcauth.Signer{DID: did, Audience: f.DID(), Key: k}).AuthFunc(), f.AdminToken)}
	err := other.Procedure(ctx, api.MethodRegisterRunner, api.RegisterRunnerInput{Repo: f.repo, Name: "builder-1"}, nil)
	check("another key under a taken runner name", err, http.StatusConflict, api.ErrConflict,
		"runner name builder-1 is taken in alice/app by another key: choose another --name, or ask an owner to run knotless runner remove --repo alice/app builder-1")

	again := &api.Client{BaseURL: f.URL, Auth: servertest.RegistrationAuth(r.Signer.AuthFunc(), f.AdminToken)}
	err = again.Procedure(ctx, api.MethodRegisterRunner, api.RegisterRunnerInput{Repo: f.repo, Name: "builder-2"}, nil)
	check("a registered key under a second name", err, http.StatusConflict, api.ErrConflict,
		"this key is already registered as runner builder-1 of alice/app: log in with a new --state file (a new key) to register another name or repository")

	err = f.alice().Procedure(ctx, api.MethodCreateAccount, api.CreateAccountInput{Handle: "bob"}, nil)
	check("a non-admin creating an account", err, http.StatusForbidden, api.ErrForbidden,
		"only admins create accounts: ask an admin of this server to run knotless account create bob")

	err = f.Admin().Procedure(ctx, api.MethodCreateAccount, api.CreateAccountInput{Handle: "alice"}, nil)
	check("a taken handle", err, http.StatusConflict, api.ErrConflict, "handle alice is taken: choose another handle")

	err = withToken(f.URL, "knl_nosuchtoken").Query(ctx, api.MethodWhoAmI, nil, nil)
	check("an unknown API token", err, http.StatusUnauthorized, api.ErrInvalidToken,
		"unknown API token: no account on this server has it (it may have been revoked: knotless token list shows yours)")

	err = f.alice().Procedure(ctx, api.MethodApproveRunner, api.RunnerRef{Repo: f.repo, Name: "nosuch"}, nil)
	check("approving an unknown runner", err, http.StatusNotFound, api.ErrNotFound,
		"no runner nosuch registered for alice/app (knotless runner list --repo alice/app)")

	run := queueOne(t, f, "")
	if err := f.alice().Procedure(ctx, api.MethodCancelRun, api.RunRef{Run: run.ID}, nil); err != nil {
		t.Fatal(err)
	}
	err = f.alice().Procedure(ctx, api.MethodCancelRun, api.RunRef{Run: run.ID}, nil)
	check("cancelling an ended run", err, http.StatusConflict, api.ErrRunFinished,
		"run "+itoa(run.ID)+" already ended cancelled; its result stands")

	if err := f.alice().Procedure(ctx, api.MethodRemoveRunner, api.RunnerRef{Repo: f.repo, Name: "builder-1"}, nil); err != nil {
		t.Fatal(err)
	}
	err = r.Client.Procedure(ctx, api.MethodClaim, api.ClaimInput{}, nil)
	if !api.IsError(err, api.ErrInvalidToken) {
		t.Errorf("claim by a removed runner: err = %v, want InvalidToken", err)
	}
}
