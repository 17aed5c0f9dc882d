package server_test

import (
	"context"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/server"
	"knotless.dev/knotless/internal/server/servertest"
)

// idWorkflow is a workflow with an id token DEPLOY (audience aud) that
// step 1 lists and step 2 does not.
func idWorkflow(aud string) string {
	return `on:
  push: {}
id-tokens:
  DEPLOY: {aud: ` + aud + `, lifetime: 5m}
  OTHER: {}
steps:
  - run: deploy
    id-tokens: [DEPLOY]
  - run: test
`
}

// claimIDRun pushes idWorkflow to main and lets runner r claim its run.
func claimIDRun(t *testing.T, f *fixture, r *servertest.Runner, aud string) *api.ClaimedRun {
	t.Helper()
	f.push(t, servertest.WorkTree(t, map[string]string{".knotless/workflows/deploy.yml": idWorkflow(aud)}), "main")
	c := claim(t, r, 5)
	if c == nil {
		t.Fatal("no run to claim")
	}
	return c
}

func idTokens(r *servertest.Runner, in api.IDTokensInput) (api.IDTokensOutput, error) {
	return api.NewRunnerClient(r.Client).IDTokens(context.Background(), in)
}

// A standard relying party (go-oidc) discovers the server as an issuer,
// fetches its keys and verifies a step's token for its audience: subject,
// repository, ref and run are the server's record of the run. The same
// request gives the same token; the claim carried none.
func TestIDTokens_RelyingPartyVerifiesAStepsTokenForItsAudience(t *testing.T) {
	t.Parallel()
	f := newFixture(t, servertest.Options{})
	r := f.RegisterRunner(t, f.repo, "deployer", nil, true)
	c := claimIDRun(t, f, r, "https://kube.example")
	if strings.Contains(c.WorkflowSource, "eyJ") || len(c.Secrets) != 0 {
		t.Fatalf("the claim carries something token-like: %+v", c.Secrets)
	}
	started := time.Now().Add(-2 * time.Second)
	out, err := idTokens(r, api.IDTokensInput{Run: c.Run.ID, Step: 1, Names: []string{"DEPLOY"}, IssuedAt: started})
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Tokens) != 1 || out.Tokens[0].Name != "DEPLOY" {
		t.Fatalf("tokens %+v", out.Tokens)
	}
	tok := out.Tokens[0]
	if d := tok.ExpiresAt.Sub(started.Truncate(time.Second)); d != 5*time.Minute {
		t.Errorf("the token expires %s after the step's start, want the workflow's 5m", d)
	}
	ctx := context.Background()
	p, err := oidc.NewProvider(ctx, f.URL)
	if err != nil {
		t.Fatalf("discover %s: %v", f.URL, err)
	}
	v := p.Verifier(&oidc.Config{ClientID: "https://kube.example"})
	idt, err := v.Verify(ctx, tok.Token)
	if err != nil {
		t.Fatalf("verify: %v", err)
	}
	var raw map[string]any
	if err := idt.Claims(&raw); err != nil {
		t.Fatal(err)
	}
	get := func(k string) string { s, _ := raw[k].(string); return s }
	canPush, _ := raw["actor_can_push"].(bool)
	if idt.Issuer != f.URL || idt.Subject != "repo:alice/app:ref:refs/heads/main" || get("repository") != "alice/app" ||
		get("ref") != "refs/heads/main" || get("ref_type") != "branch" || get("event") != "push" || get("actor") != "alice" ||
		!canPush || get("runner") != "deployer" || get("run_id") != itoa(c.Run.ID) || get("jti") == "" || get("sha") != c.Run.SHA ||
		get("repository_id") == "" || get("pipeline_id") != itoa(c.Run.Pipeline) || get("workflow") != "deploy" {
		t.Errorf("token %s %s claims %v", idt.Issuer, idt.Subject, raw)
	}
	if nbf, iat := raw["nbf"].(float64), raw["iat"].(float64); int64(iat)-int64(nbf) != 30 || int64(iat) != started.Unix() {
		t.Errorf("iat %v nbf %v, want iat the step's start and nbf 30 s before", iat, nbf)
	}
	// Another audience's relying party refuses it.
	if _, err := p.Verifier(&oidc.Config{ClientID: "https://vault.example"}).Verify(ctx, tok.Token); err == nil {
		t.Errorf("a relying party of another audience accepted the token")
	}
	again, err := idTokens(r, api.IDTokensInput{Run: c.Run.ID, Step: 1, Names: []string{"DEPLOY"}, IssuedAt: started})
	if err != nil || again.Tokens[0].Token != tok.Token {
		t.Errorf("the same request gave another token (%v)", err)
	}
}

// wantRefused asserts err is an XRPC error of status.
func wantRefused(t *testing.T, what string, err error, status int) {
	t.Helper()
	var e *api.Error
	if !errors.As(err, &e) || e.Status != status {
		t.Errorf("%s: err %v, want HTTP %d", what, err, status)
	}
}

// Only the runner holding the run's lease gets tokens, only for a step
// that lists them, only while the run has not ended; a step start in the
// future is refused.
func TestIDTokens_OnlyTheLeaseHolderGetsOnlyWhatTheStepLists(t *testing.T) {
	t.Parallel()
	f := newFixture(t, servertest.Options{})
	holder := f.RegisterRunner(t, f.repo, "holder", nil, true)
	other := f.RegisterRunner(t, f.repo, "other", nil, true)
	c := claimIDRun(t, f, holder, "https://kube.example")
	in := api.IDTokensInput{Run: c.Run.ID, Step: 1, Names: []string{"DEPLOY"}}
	_, err := idTokens(other, in)
	wantRefused(t, "a runner that does not hold the run", err, http.StatusForbidden)
	_, err = idTokens(holder, api.IDTokensInput{Run: c.Run.ID, Step: 2, Names: []string{"DEPLOY"}})
	wantRefused(t, "a step that does not list the token", err, http.StatusForbidden)
	_, err = idTokens(holder, api.IDTokensInput{Run: c.Run.ID, Step: 1, Names: []string{"OTHER"}})
	wantRefused(t, "a token the step does not list", err, http.StatusForbidden)
	_, err = idTokens(holder, api.IDTokensInput{Run: c.Run.ID, Step: 1, Names: []string{"DEPLOY"}, IssuedAt: time.Now().Add(time.Hour)})
	wantRefused(t, "a start an hour ahead", err, http.StatusBadRequest)
	if _, err := idTokens(holder, in); err != nil {
		t.Fatalf("the holder is refused: %v", err)
	}
	if err := holder.Client.Procedure(context.Background(), api.MethodComplete,
		api.CompleteInput{Run: c.Run.ID, State: api.StateSucceeded}, nil); err != nil {
		t.Fatal(err)
	}
	_, err = idTokens(holder, in)
	wantRefused(t, "a finished run", err, http.StatusConflict)
}

// A run whose lease lapsed (its runner went quiet) gets no token, even
// for the runner that held it.
func TestIDTokens_LapsedLeaseGetsNothing(t *testing.T) {
	t.Parallel()
	f := newFixture(t, servertest.Options{Lease: time.Second})
	r := f.RegisterRunner(t, f.repo, "quiet", nil, true)
	c := claimIDRun(t, f, r, "https://kube.example")
	f.WaitRun(t, c.Run.ID, 30*time.Second, func(run api.Run) bool { return api.IsFinal(run.State) })
	_, err := idTokens(r, api.IDTokensInput{Run: c.Run.ID, Step: 1, Names: []string{"DEPLOY"}})
	var e *api.Error
	if !errors.As(err, &e) || (e.Status != http.StatusConflict && e.Status != http.StatusForbidden) {
		t.Errorf("err %v, want the run's end or its lapsed lease", err)
	}
}

// The keys file is in the data directory, and the discovery document and
// JWKS are served at the issuer's well-known paths.
func TestIDTokens_KeysLiveInTheDataDirectory(t *testing.T) {
	t.Parallel()
	f := newFixture(t, servertest.Options{})
	if !exists(filepath.Join(f.DataDir, server.OIDCKeysFile)) {
		t.Fatalf("no %s in the data directory", server.OIDCKeysFile)
	}
	for _, p := range []string{"/.well-known/openid-configuration", "/.well-known/jwks.json"} {
		resp, err := http.Get(f.URL + p)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/json" {
			t.Errorf("GET %s: %s %s", p, resp.Status, resp.Header.Get("Content-Type"))
		}
	}
}

func exists(p string) bool { _, err := os.Stat(p); return err == nil }
