package storetest

import (
	"context"
	"errors"
	"testing"
	"time"

	"knotless.dev/knotless/internal/store"
)

func testToken_ExpiryDisabledAndLastUsedAtMostEveryMinute(t *testing.T, open Opener) {
	db := open(t)
	ctx := context.Background()
	a, err := db.CreateAccount(ctx, store.Account{Handle: "alice", DID: "did:key:alice"}, "h1")
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	exp := t0.Add(time.Hour)
	if _, err := db.CreateToken(ctx, store.Token{AccountID: a.ID, Name: "ci", Hash: "h2", CreatedAt: t0, ExpiresAt: &exp}, 2); err != nil {
		t.Fatal(err)
	}
	if _, err := db.CreateToken(ctx, store.Token{AccountID: a.ID, Name: "ci", Hash: "h3"}, 0); !errors.Is(err, store.ErrConflict) {
		t.Errorf("a taken name: %v, want ErrConflict", err)
	}
	if _, err := db.CreateToken(ctx, store.Token{AccountID: a.ID, Name: "more", Hash: "h4"}, 2); !errors.Is(err, store.ErrLimit) {
		t.Errorf("past the cap: %v, want ErrLimit", err)
	}
	lastUsed := func() *time.Time {
		ts, err := db.ListTokens(ctx, a.ID)
		if err != nil || len(ts) != 2 || ts[0].Name != "ci" {
			t.Fatalf("tokens: %+v, %v", ts, err)
		}
		return ts[0].LastUsedAt
	}
	if lastUsed() != nil {
		t.Fatal("an unused token has a last use")
	}
	if _, err := db.AccountByToken(ctx, "h2", t0); err != nil {
		t.Fatal(err)
	}
	if u := lastUsed(); u == nil || u.UnixMilli() != t0.UnixMilli() {
		t.Fatalf("last used %v, want %v", u, t0)
	}
	db.AccountByToken(ctx, "h2", t0.Add(30*time.Second))
	if u := lastUsed(); u.UnixMilli() != t0.UnixMilli() {
		t.Errorf("last used rewritten after 30 s: %v", u)
	}
	db.AccountByToken(ctx, "h2", t0.Add(61*time.Second))
	if u := lastUsed(); u.UnixMilli() != t0.Add(61*time.Second).UnixMilli() {
		t.Errorf("last used not rewritten after 61 s: %v", u)
	}
	if _, err := db.AccountByToken(ctx, "h2", exp); !errors.Is(err, store.ErrTokenExpired) {
		t.Errorf("at its expiry: %v, want ErrTokenExpired", err)
	}
	if _, err := db.SetAccountDisabled(ctx, "alice", true); err != nil {
		t.Fatal(err)
	}
	if _, err := db.AccountByToken(ctx, "h1", t0); !errors.Is(err, store.ErrAccountDisabled) {
		t.Errorf("disabled: %v, want ErrAccountDisabled", err)
	}
	if _, err := db.SetAccountDisabled(ctx, "nosuch", true); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("disabling nobody: %v", err)
	}
	if err := db.DeleteToken(ctx, a.ID, "ci", true); err != nil {
		t.Fatal(err)
	}
	if _, err := db.AccountByToken(ctx, "h2", t0); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("deleted token: %v, want ErrNotFound", err)
	}
	if err := db.DeleteToken(ctx, a.ID, "initial", true); !errors.Is(err, store.ErrLimit) {
		t.Errorf("deleting the last token: %v, want ErrLimit", err)
	}
	if ts, _ := db.ListTokens(ctx, a.ID); len(ts) != 1 {
		t.Errorf("the refused delete removed it: %+v", ts)
	}
}
