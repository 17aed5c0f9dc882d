package server_test

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/server"
	"knotless.dev/knotless/internal/server/servertest"
	"knotless.dev/knotless/internal/svcauth"
)

// registerWith registers a fresh key as runner name of repo, sending cred
// ("" sends no registration credential).
func registerWith(t *testing.T, f *fixture, cred, repo, name string) error {
	t.Helper()
	key, err := svcauth.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	did, _ := svcauth.DIDKey(key)
	auth := (&svcauth.Signer{DID: did, Audience: f.DID(), Key: key}).AuthFunc()
	if cred != "" {
		auth = servertest.RegistrationAuth(auth, cred)
	}
	c := &api.Client{BaseURL: f.URL, Auth: auth}
	return c.Procedure(context.Background(), api.MethodRegisterRunner, api.RegisterRunnerInput{Repo: repo, Name: name}, nil)
}

// regToken makes a registration token of repo as the account of apiToken.
func regToken(t *testing.T, f *fixture, apiToken string, in api.CreateRegistrationTokenInput) string {
	t.Helper()
	var out api.RegistrationToken
	if err := f.Client(apiToken).Procedure(context.Background(), api.MethodCreateRegistrationToken, in, &out); err != nil {
		t.Fatalf("create registration token: %v", err)
	}
	return out.Token
}

func apiErr(t *testing.T, err error) *api.Error {
	t.Helper()
	var e *api.Error
	if !errorAs(err, &e) {
		t.Fatalf("err = %v, want an XRPC error", err)
	}
	return e
}

func TestRegister_WithoutTokenIsRefusedAndRevealsNoRepository(t *testing.T) {
	t.Parallel()
	f := newFixture(t, servertest.Options{})
	bob := f.CreateAccount(t, "bob")
	f.CreateRepo(t, bob, "app")
	bobToken := regToken(t, f, bob, api.CreateRegistrationTokenInput{Repo: "bob/app"})
	for _, cred := range []struct{ what, cred string }{
		{"no token", ""},
		{"an unknown registration token", "knreg_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"},
		{"garbage", "hello"},
		{"an API token of an account that does not own it", bob},
		{"a registration token of bob/app", bobToken},
	} {
		// alice/app exists, alice/ghost does not: the answers are the same
		// but for the name the caller gave.
		real := apiErr(t, registerWith(t, f, cred.cred, "alice/app", "r1"))
		ghost := apiErr(t, registerWith(t, f, cred.cred, "alice/ghost", "r1"))
		if real.Status != ghost.Status || real.Name != ghost.Name || real.Status/100 != 4 {
			t.Errorf("%s: existing repo %d %s, missing repo %d %s: want the same 401/403", cred.what, real.Status, real.Name, ghost.Status, ghost.Name)
		}
		want := "registering a runner for alice/app needs a registration token from an owner of the repository (knotless runner token --repo alice/app), given to knotless-run login --token (or KNOTLESS_REGISTRATION_TOKEN); a missing, unknown, expired or used-up token, or one of another repository, is refused"
		if real.Message != want {
			t.Errorf("%s: message %q, want %q", cred.what, real.Message, want)
		}
		if ghost.Message != strings.ReplaceAll(want, "alice/app", "alice/ghost") {
			t.Errorf("%s: message for a missing repository %q differs from that of an existing one", cred.what, ghost.Message)
		}
	}
	// Nothing was registered.
	var out api.ListRunnersOutput
	if err := f.alice().Query(context.Background(), api.MethodListRunners, map[string][]string{"repo": {f.repo}}, &out); err != nil {
		t.Fatal(err)
	}
	if len(out.Runners) != 0 {
		t.Errorf("runners after refused registrations: %+v", out.Runners)
	}
	// The owner's own API token and a token the owner made both work.
	if err := registerWith(t, f, f.token, f.repo, "by-api-token"); err != nil {
		t.Errorf("register with the owner's API token: %v", err)
	}
	if err := registerWith(t, f, regToken(t, f, f.token, api.CreateRegistrationTokenInput{Repo: f.repo}), f.repo, "by-reg-token"); err != nil {
		t.Errorf("register with a registration token: %v", err)
	}
}

func TestRegister_TokenOfAnotherRepositoryIsRefused(t *testing.T) {
	t.Parallel()
	f := newFixture(t, servertest.Options{})
	f.CreateRepo(t, f.token, "other")
	tok := regToken(t, f, f.token, api.CreateRegistrationTokenInput{Repo: "alice/other", Uses: 5})
	if e := apiErr(t, registerWith(t, f, tok, f.repo, "r1")); e.Status != http.StatusForbidden {
		t.Errorf("token of alice/other used for alice/app: %d %s, want 403", e.Status, e.Name)
	}
	if err := registerWith(t, f, tok, "alice/other", "r1"); err != nil {
		t.Errorf("token used for its own repository: %v", err)
	}
	// A stranger cannot make one for alice's repository.
	bob := f.CreateAccount(t, "bob")
	err := f.Client(bob).Procedure(context.Background(), api.MethodCreateRegistrationToken, api.CreateRegistrationTokenInput{Repo: f.repo}, nil)
	if !api.IsError(err, api.ErrNotFound) {
		t.Errorf("bob makes a token for alice/app: err = %v, want NotFound (as for a repository that does not exist)", err)
	}
}

func TestRegister_ExpiredOrUsedTokenIsRefused(t *testing.T) {
	t.Parallel()
	clock := &servertest.Clock{}
	f := newFixture(t, servertest.Options{Clock: clock})
	once := regToken(t, f, f.token, api.CreateRegistrationTokenInput{Repo: f.repo})
	if err := registerWith(t, f, once, f.repo, "r1"); err != nil {
		t.Fatalf("first use: %v", err)
	}
	if e := apiErr(t, registerWith(t, f, once, f.repo, "r2")); e.Status != http.StatusForbidden {
		t.Errorf("second use of a one-use token: %d %s, want 403", e.Status, e.Name)
	}
	// A refused registration (a taken name) gives its use back.
	twice := regToken(t, f, f.token, api.CreateRegistrationTokenInput{Repo: f.repo, Uses: 1})
	if err := registerWith(t, f, twice, f.repo, "r1"); !api.IsError(err, api.ErrConflict) {
		t.Fatalf("taken name: err = %v, want Conflict", err)
	}
	if err := registerWith(t, f, twice, f.repo, "r3"); err != nil {
		t.Errorf("token after a refused registration: %v", err)
	}
	short := regToken(t, f, f.token, api.CreateRegistrationTokenInput{Repo: f.repo, ExpiresIn: 1})
	clock.Advance(2 * time.Second)
	if e := apiErr(t, registerWith(t, f, short, f.repo, "r4")); e.Status != http.StatusForbidden {
		t.Errorf("expired token: %d %s, want 403", e.Status, e.Name)
	}
	for _, in := range []api.CreateRegistrationTokenInput{
		{Repo: f.repo, ExpiresIn: -1}, {Repo: f.repo, ExpiresIn: 8 * 24 * 3600}, {Repo: f.repo, Uses: -1}, {Repo: f.repo, Uses: 1001},
	} {
		if err := f.alice().Procedure(context.Background(), api.MethodCreateRegistrationToken, in, nil); !api.IsError(err, api.ErrInvalidRequest) {
			t.Errorf("%+v: err = %v, want InvalidRequest", in, err)
		}
	}
}

func TestRegister_IsRateLimitedPerClient(t *testing.T) {
	t.Parallel()
	f := newFixture(t, servertest.Options{ClientLimits: server.ClientLimits{RegistrationsPerMinute: 3}})
	// Refused attempts count: a token guesser is slowed down as much.
	for i := range 3 {
		if err := registerWith(t, f, "", f.repo, "r"+strconv.Itoa(i)); api.IsError(err, api.ErrTooManyRegistrations) {
			t.Fatalf("attempt %d already limited: %v", i, err)
		}
	}
	// Even with a valid token, the fourth in the minute is refused.
	key, _ := svcauth.GenerateKey()
	did, _ := svcauth.DIDKey(key)
	tok, err := (&svcauth.Signer{DID: did, Audience: f.DID(), Key: key}).Token(api.MethodRegisterRunner)
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest(http.MethodPost, f.URL+"/xrpc/"+api.MethodRegisterRunner, strings.NewReader(`{"repo":"alice/app","name":"r9"}`))
	req.Header.Set("Authorization", "Bearer "+tok)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(api.RegistrationTokenHeader, f.token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("fourth registration in a minute: %d, want 429", resp.StatusCode)
	}
	if ra, err := strconv.Atoi(resp.Header.Get("Retry-After")); err != nil || ra < 1 || ra > 60 {
		t.Errorf("Retry-After %q, want 1..60 seconds", resp.Header.Get("Retry-After"))
	}
}
