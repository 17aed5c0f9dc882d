package svcauth

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/bluesky-social/indigo/atproto/atcrypto"
)

func newPair(t *testing.T) (*Signer, *Verifier) {
	t.Helper()
	key, err := GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	did, err := DIDKey(key)
	if err != nil {
		t.Fatal(err)
	}
	server, _ := GenerateKey()
	aud, _ := DIDKey(server)
	return &Signer{DID: did, Audience: aud, Key: key},
		&Verifier{Audience: aud, Keys: DIDKeyLookup, Replay: NewMemoryReplayCache(0, 0)}
}

func TestVerify_AcceptsFreshTokenOnce(t *testing.T) {
	s, v := newPair(t)
	tok, err := s.Token("dev.knotless.runner.claim")
	if err != nil {
		t.Fatal(err)
	}
	did, err := v.Verify(context.Background(), tok, "dev.knotless.runner.claim")
	if err != nil || did != s.DID {
		t.Fatalf("Verify = %q, %v; want %q, nil", did, err, s.DID)
	}
	if _, err := v.Verify(context.Background(), tok, "dev.knotless.runner.claim"); !errors.Is(err, ErrReplayed) {
		t.Fatalf("replayed token: err = %v, want ErrReplayed", err)
	}
}

func TestVerify_RefusesTokenForAnotherMethod(t *testing.T) {
	s, v := newPair(t)
	tok, _ := s.Token("dev.knotless.runner.heartbeat")
	if _, err := v.Verify(context.Background(), tok, "dev.knotless.runner.claim"); !errors.Is(err, ErrWrongMethod) {
		t.Fatalf("err = %v, want ErrWrongMethod", err)
	}
}

func TestVerify_RefusesExpiredToken(t *testing.T) {
	s, v := newPair(t)
	s.TTL = -time.Minute
	tok, _ := s.Token("dev.knotless.runner.claim")
	if _, err := v.Verify(context.Background(), tok, "dev.knotless.runner.claim"); !errors.Is(err, ErrExpired) {
		t.Fatalf("err = %v, want ErrExpired", err)
	}
}

func TestVerify_RefusesLongLivedToken(t *testing.T) {
	s, v := newPair(t)
	s.TTL = time.Hour
	tok, _ := s.Token("dev.knotless.runner.claim")
	if _, err := v.Verify(context.Background(), tok, "dev.knotless.runner.claim"); !errors.Is(err, ErrTooLong) {
		t.Fatalf("err = %v, want ErrTooLong", err)
	}
}

func TestVerify_RefusesOtherAudienceAndForeignKey(t *testing.T) {
	s, v := newPair(t)
	other, _ := newPair(t)
	s.Audience = other.Audience
	tok, _ := s.Token("dev.knotless.runner.claim")
	if _, err := v.Verify(context.Background(), tok, "dev.knotless.runner.claim"); !errors.Is(err, ErrInvalid) {
		t.Fatalf("wrong audience: err = %v, want ErrInvalid", err)
	}
	// A token signed by one key but claiming another runner's DID.
	s2, _ := newPair(t)
	forged := &Signer{DID: s2.DID, Audience: v.Audience, Key: s.Key}
	tok, _ = forged.Token("dev.knotless.runner.claim")
	if _, err := v.Verify(context.Background(), tok, "dev.knotless.runner.claim"); !errors.Is(err, ErrInvalid) {
		t.Fatalf("forged issuer: err = %v, want ErrInvalid", err)
	}
}

func TestVerify_ForgedTokenLogsNothingAndLooksTheKeyUpOnce(t *testing.T) {
	// indigo's validator logged an INFO line per forged token through
	// slog's default logger, whatever the server's log level.
	var logged bytes.Buffer
	old := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&logged, &slog.HandlerOptions{Level: slog.LevelDebug})))
	defer slog.SetDefault(old)
	s, v := newPair(t)
	lookups := 0
	v.Keys = func(ctx context.Context, did string) (atcrypto.PublicKey, error) {
		lookups++
		return DIDKeyLookup(ctx, did)
	}
	forger, err := GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	forged := &Signer{DID: s.DID, Audience: s.Audience, Key: forger}
	tok, err := forged.Token("dev.knotless.runner.claim")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := v.Verify(context.Background(), tok, "dev.knotless.runner.claim"); !errors.Is(err, ErrInvalid) {
		t.Fatalf("forged token: err = %v, want ErrInvalid", err)
	}
	if logged.Len() > 0 {
		t.Errorf("verifying a forged token logged:\n%s", logged.String())
	}
	if lookups != 1 {
		t.Errorf("key looked up %d times for one token, want 1", lookups)
	}
}
