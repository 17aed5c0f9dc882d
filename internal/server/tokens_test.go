package server_test

import (
	"bytes"
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/server/servertest"
)

func createToken(t *testing.T, c *api.Client, name string, expires *time.Time) api.CreateTokenOutput {
	t.Helper()
	var out api.CreateTokenOutput
	if err := c.Procedure(context.Background(), api.MethodCreateToken, api.CreateTokenInput{Name: name, ExpiresAt: expires}, &out); err != nil {
		t.Fatalf("create token %s: %v", name, err)
	}
	if !strings.HasPrefix(out.Secret, "knl_") || out.Token.Name != name {
		t.Fatalf("create token %s: %+v", name, out)
	}
	return out
}

func whoami(c *api.Client) (api.Account, error) {
	var a api.Account
	err := c.Query(context.Background(), api.MethodWhoAmI, nil, &a)
	return a, err
}

func TestToken_RevokedTokenIsRefusedAtOnce(t *testing.T) {
	t.Parallel()
	f := newFixture(t, servertest.Options{})
	ctx := context.Background()
	ci := createToken(t, f.alice(), "ci", nil)
	if a, err := whoami(f.Client(ci.Secret)); err != nil || a.Handle != "alice" {
		t.Fatalf("whoami with the new token: %+v, %v", a, err)
	}
	// Revoked with itself: the next request is refused.
	if err := f.Client(ci.Secret).Procedure(ctx, api.MethodRevokeToken, api.RevokeTokenInput{Name: "ci"}, nil); err != nil {
		t.Fatalf("revoke: %v", err)
	}
	_, err := whoami(f.Client(ci.Secret))
	wantError(t, "the revoked token", err, http.StatusUnauthorized, api.ErrInvalidToken,
		"unknown API token: no account on this server has it (it may have been revoked: knotless token list shows yours)")
	if out, err := servertest.GitErr(t, "", "ls-remote", f.GitURL(f.repo, ci.Secret)); err == nil || !strings.Contains(out, "401") && !strings.Contains(out, "Authentication failed") {
		t.Errorf("git with the revoked token: err %v, output:\n%s", err, out)
	}
	// The other token still works, and is the last one: not revocable.
	if _, err := whoami(f.alice()); err != nil {
		t.Fatalf("the initial token after revoking another: %v", err)
	}
	err = f.alice().Procedure(ctx, api.MethodRevokeToken, api.RevokeTokenInput{Name: "initial"}, nil)
	wantError(t, "revoking the last token", err, http.StatusConflict, api.ErrConflict,
		"token initial is your account's last: create another first (knotless token create NAME), log in with it, then revoke this one")
	err = f.alice().Procedure(ctx, api.MethodRevokeToken, api.RevokeTokenInput{Name: "nosuch"}, nil)
	wantError(t, "revoking an unknown token", err, http.StatusNotFound, api.ErrNotFound,
		"you have no token named nosuch (knotless token list shows yours)")
	// Names are per account; a taken one is a conflict.
	createToken(t, f.alice(), "laptop", nil)
	err = f.alice().Procedure(ctx, api.MethodCreateToken, api.CreateTokenInput{Name: "laptop"}, nil)
	wantError(t, "a taken token name", err, http.StatusConflict, api.ErrConflict,
		"you have a token named laptop already: choose another name, or revoke it first (knotless token revoke laptop)")
	createToken(t, f.Admin(), "laptop", nil)
}

func TestToken_ExpiredTokenIsRefused(t *testing.T) {
	t.Parallel()
	clock := &servertest.Clock{}
	f := newFixture(t, servertest.Options{Clock: clock})
	past := clock.Now().Add(-time.Second)
	err := f.alice().Procedure(context.Background(), api.MethodCreateToken, api.CreateTokenInput{Name: "old", ExpiresAt: &past}, nil)
	if e := (*api.Error)(nil); !errorAs(err, &e) || e.Status != http.StatusBadRequest {
		t.Errorf("creating an already expired token: %v, want 400", err)
	}
	exp := clock.Now().Add(time.Hour)
	short := createToken(t, f.alice(), "short", &exp)
	if _, err := whoami(f.Client(short.Secret)); err != nil {
		t.Fatalf("before its expiry: %v", err)
	}
	clock.Advance(time.Hour + time.Second)
	_, err = whoami(f.Client(short.Secret))
	var e *api.Error
	if !errorAs(err, &e) || e.Status != http.StatusUnauthorized || e.Name != api.ErrExpiredToken ||
		!strings.HasPrefix(e.Message, "API token short of alice expired at ") {
		t.Fatalf("after its expiry: %v", err)
	}
	if out, err := servertest.GitErr(t, "", "ls-remote", f.GitURL(f.repo, short.Secret)); err == nil {
		t.Errorf("git with the expired token worked:\n%s", out)
	}
}

func TestAccount_DisabledAccountsTokensAreRefusedAlsoForGit(t *testing.T) {
	t.Parallel()
	f := newFixture(t, servertest.Options{})
	ctx := context.Background()
	second := createToken(t, f.alice(), "second", nil)
	if _, err := servertest.GitErr(t, "", "ls-remote", f.GitURL(f.repo, f.token)); err != nil {
		t.Fatalf("git before disabling: %v", err)
	}
	err := f.alice().Procedure(ctx, api.MethodDisableAccount, api.AccountRef{Handle: "alice"}, nil)
	wantError(t, "a non-admin disabling", err, http.StatusForbidden, api.ErrForbidden, "only admins disable accounts")
	err = f.Admin().Procedure(ctx, api.MethodDisableAccount, api.AccountRef{Handle: "admin"}, nil)
	wantError(t, "an admin disabling themselves", err, http.StatusForbidden, api.ErrForbidden,
		"you cannot disable your own account: another admin may")

	var a api.Account
	if err := f.Admin().Procedure(ctx, api.MethodDisableAccount, api.AccountRef{Handle: "alice"}, &a); err != nil || !a.Disabled {
		t.Fatalf("disable alice: %+v, %v", a, err)
	}
	for _, tok := range []string{f.token, second.Secret} {
		_, err := whoami(f.Client(tok))
		wantError(t, "a disabled account's token", err, http.StatusUnauthorized, api.ErrAccountDisabled,
			"account alice is disabled by an admin of this server: its tokens are refused until an admin enables it (knotless account enable)")
		out, err := servertest.GitErr(t, "", "ls-remote", f.GitURL(f.repo, tok))
		if err == nil {
			t.Errorf("git with a disabled account's token worked:\n%s", out)
		}
	}
	// The admin still reaches alice's repository.
	if _, err := servertest.GitErr(t, "", "ls-remote", f.GitURL(f.repo, f.AdminToken)); err != nil {
		t.Errorf("admin git while alice is disabled: %v", err)
	}
	var enabled api.Account
	if err := f.Admin().Procedure(ctx, api.MethodEnableAccount, api.AccountRef{Handle: "alice"}, &enabled); err != nil || enabled.Disabled || enabled.Handle != "alice" {
		t.Fatalf("enable alice: %+v, %v", enabled, err)
	}
	if _, err := whoami(f.Client(second.Secret)); err != nil {
		t.Errorf("after enabling: %v", err)
	}
	if _, err := servertest.GitErr(t, "", "ls-remote", f.GitURL(f.repo, f.token)); err != nil {
		t.Errorf("git after enabling: %v", err)
	}
	err = f.Admin().Procedure(ctx, api.MethodDisableAccount, api.AccountRef{Handle: "nosuch"}, nil)
	wantError(t, "disabling an unknown account", err, http.StatusNotFound, api.ErrNotFound, "no account nosuch")
}

func TestToken_ListShowsNoSecretAndLastUsed(t *testing.T) {
	t.Parallel()
	f := newFixture(t, servertest.Options{})
	ctx := context.Background()
	exp := time.Now().Add(time.Hour)
	unused := createToken(t, f.alice(), "unused", &exp)
	if _, err := whoami(f.alice()); err != nil {
		t.Fatal(err)
	}
	resp, err := f.alice().Do(ctx, http.MethodGet, api.MethodListTokens, nil, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var raw bytes.Buffer
	if _, err := raw.ReadFrom(resp.Body); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(raw.String(), "knl_") || strings.Contains(raw.String(), unused.Secret[4:]) ||
		strings.Contains(raw.String(), f.token[4:]) {
		t.Fatalf("token list carries a token:\n%s", raw.String())
	}
	var out api.ListTokensOutput
	if err := f.alice().Query(ctx, api.MethodListTokens, nil, &out); err != nil {
		t.Fatal(err)
	}
	if len(out.Tokens) != 2 {
		t.Fatalf("tokens: %+v, want initial and unused", out.Tokens)
	}
	initial, un := out.Tokens[0], out.Tokens[1]
	if initial.Name != "initial" || initial.LastUsedAt == nil || time.Since(*initial.LastUsedAt) > time.Minute ||
		!initial.Current || initial.ExpiresAt != nil {
		t.Errorf("initial token: %+v, want used just now, current, no expiry", initial)
	}
	if un.Name != "unused" || un.LastUsedAt != nil || un.Current || un.ExpiresAt == nil || !un.ExpiresAt.Equal(exp.Truncate(time.Millisecond)) {
		t.Errorf("unused token: %+v, want never used, expiring %v", un, exp)
	}
	// Another account sees only its own.
	var admin api.ListTokensOutput
	if err := f.Admin().Query(ctx, api.MethodListTokens, nil, &admin); err != nil {
		t.Fatal(err)
	}
	if len(admin.Tokens) != 1 || admin.Tokens[0].Name != "initial" {
		t.Errorf("admin's tokens: %+v", admin.Tokens)
	}
}
