package server_test

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/server"
	"knotless.dev/knotless/internal/server/servertest"
)

func TestFirstStart_WritesAdminTokenWithMode0600(t *testing.T) {
	t.Parallel()
	s := servertest.Start(t, servertest.Options{})
	for _, f := range []string{server.AdminTokenFile, server.SecretKeyFile, server.ServerKeyFile} {
		fi, err := os.Stat(filepath.Join(s.DataDir, f))
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: mode %v, want 0600", f, fi.Mode().Perm())
		}
	}
	if !strings.HasPrefix(s.AdminToken, "knl_") {
		t.Errorf("admin token %q lacks the knl_ prefix", s.AdminToken)
	}
	var me api.Account
	if err := s.Admin().Query(context.Background(), api.MethodWhoAmI, nil, &me); err != nil {
		t.Fatal(err)
	}
	if me.Handle != "admin" || !me.Admin || !strings.HasPrefix(me.DID, "did:key:") {
		t.Errorf("whoami = %+v", me)
	}
	var d api.DescribeServerOutput
	if err := s.Admin().Query(context.Background(), api.MethodDescribeServer, nil, &d); err != nil {
		t.Fatal(err)
	}
	if d.DID != s.DID() || !strings.HasPrefix(d.DID, "did:key:") {
		t.Errorf("describe DID %q, want %q", d.DID, s.DID())
	}
	// A restart keeps the same token, keys and DID.
	tok, did := s.AdminToken, s.DID()
	s.Restart()
	if s.AdminToken != tok || s.DID() != did {
		t.Errorf("restart changed the admin token or the server DID")
	}
	if err := s.Admin().Query(context.Background(), api.MethodWhoAmI, nil, &me); err != nil {
		t.Fatalf("whoami after restart: %v", err)
	}
}

func TestXRPC_ErrorsHaveNameMessageAndStatus(t *testing.T) {
	t.Parallel()
	s := servertest.Start(t, servertest.Options{})
	cases := []struct {
		name, method, nsid, auth string
		status                   int
		errName                  string
	}{
		{"unknown method", "GET", "dev.knotless.nope", "", 501, api.ErrNotImplemented},
		{"GET on a procedure", "GET", api.MethodCreateRepo, s.AdminToken, 405, api.ErrInvalidRequest},
		{"POST on a query", "POST", api.MethodWhoAmI, s.AdminToken, 405, api.ErrInvalidRequest},
		{"no token", "GET", api.MethodWhoAmI, "", 401, api.ErrAuthRequired},
		{"wrong token", "GET", api.MethodWhoAmI, "knl_wrong", 401, api.ErrInvalidToken},
		{"account token on a runner method", "POST", api.MethodClaim, s.AdminToken, 401, api.ErrInvalidToken},
		{"garbage JWT", "POST", api.MethodClaim, "a.b.c", 401, api.ErrInvalidToken},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			req, _ := http.NewRequest(c.method, s.URL+"/xrpc/"+c.nsid, strings.NewReader(`{}`))
			if c.auth != "" {
				req.Header.Set("Authorization", "Bearer "+c.auth)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var e api.Error
			if err := json.NewDecoder(resp.Body).Decode(&e); err != nil {
				t.Fatalf("error body is not JSON: %v", err)
			}
			if resp.StatusCode != c.status || e.Name != c.errName || e.Message == "" {
				t.Errorf("got %d %q %q; want %d %q with a message", resp.StatusCode, e.Name, e.Message, c.status, c.errName)
			}
		})
	}
}

func TestAccountsAndRepos_ValidationAndPermissions(t *testing.T) {
	t.Parallel()
	s := servertest.Start(t, servertest.Options{})
	ctx := context.Background()
	alice := s.Client(s.CreateAccount(t, "alice"))
	if err := alice.Procedure(ctx, api.MethodCreateAccount, api.CreateAccountInput{Handle: "eve"}, nil); !api.IsError(err, api.ErrForbidden) {
		t.Errorf("account creation by a non-admin: err = %v, want Forbidden", err)
	}
	// The one name rule (api.CheckHandle): no ".", "..", leading dot, dash
	// or underscore, at most 100 characters, lowercase.
	for _, h := range []string{"Alice", "", ".", "..", ".hidden", "-x", "_x", "a/b", "x.git", strings.Repeat("a", 101)} {
		if err := s.Admin().Procedure(ctx, api.MethodCreateAccount, api.CreateAccountInput{Handle: h}, nil); !api.IsError(err, api.ErrInvalidRequest) {
			t.Errorf("handle %q: err = %v, want InvalidRequest", h, err)
		}
	}
	if err := s.Admin().Procedure(ctx, api.MethodCreateAccount, api.CreateAccountInput{Handle: "alice"}, nil); !api.IsError(err, api.ErrConflict) {
		t.Errorf("duplicate handle: err = %v, want Conflict", err)
	}
	var repo api.Repo
	if err := alice.Procedure(ctx, api.MethodCreateRepo, api.CreateRepoInput{Repo: "app"}, &repo); err != nil {
		t.Fatal(err)
	}
	if repo.Owner != "alice" || repo.CloneURL != s.URL+"/alice/app.git" {
		t.Errorf("repo = %+v", repo)
	}
	if err := alice.Procedure(ctx, api.MethodCreateRepo, api.CreateRepoInput{Repo: "alice/app"}, nil); !api.IsError(err, api.ErrConflict) {
		t.Errorf("duplicate repo: err = %v, want Conflict", err)
	}
	for _, n := range []string{"x.git", "a/b/c", "sp ace", "..", ""} {
		if err := alice.Procedure(ctx, api.MethodCreateRepo, api.CreateRepoInput{Repo: n}, nil); !api.IsError(err, api.ErrInvalidRequest) {
			t.Errorf("repo name %q: err = %v, want InvalidRequest", n, err)
		}
	}
	if err := alice.Procedure(ctx, api.MethodCreateRepo, api.CreateRepoInput{Repo: "admin/app"}, nil); !api.IsError(err, api.ErrForbidden) {
		t.Errorf("repo under another handle by a non-admin: err = %v, want Forbidden", err)
	}
	if err := s.Admin().Procedure(ctx, api.MethodCreateRepo, api.CreateRepoInput{Repo: "alice/tools"}, nil); err != nil {
		t.Errorf("admin creating a repo for alice: %v", err)
	}
	var list api.ListReposOutput
	if err := alice.Query(ctx, api.MethodListRepos, nil, &list); err != nil || len(list.Repos) != 2 {
		t.Errorf("alice's repos = %+v, %v; want app and tools", list.Repos, err)
	}
	if err := s.Admin().Procedure(ctx, api.MethodCreateRepo, api.CreateRepoInput{Repo: "admin/own"}, nil); err != nil {
		t.Fatal(err)
	}
	if err := alice.Query(ctx, api.MethodListRepos, nil, &list); err != nil || len(list.Repos) != 2 {
		t.Errorf("alice sees %d repos, want only her 2", len(list.Repos))
	}
	if err := s.Admin().Query(ctx, api.MethodListRepos, nil, &list); err != nil || len(list.Repos) != 3 {
		t.Errorf("admin sees %d repos, want all 3", len(list.Repos))
	}
}
