package server_test

import (
	"bytes"
	"context"
	"net/http"
	"testing"
	"unicode/utf8"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/server/servertest"
)

// notUTF8 is 19 bytes that are not valid UTF-8 (as random bytes mostly are).
var notUTF8 = []byte{0xff, 0xfe, 0x80, 'k', 0xc3, 0x28, 0xa0, 0xa1, 0xe2, 0x28, 0xa1, 0xf0, 0x90, 0x28, 0xbc, 0x01, 0x7f, 0xed, 0xa0}

// A value that is not valid UTF-8 used to become 27 bytes with U+FFFD in
// place of each bad byte (JSON strings on the wire): it reaches the claim,
// and a resume, byte-exact.
func TestSetSecret_NonUTF8ValueIsNotAlteredOnTheWayToTheRunner(t *testing.T) {
	t.Parallel()
	if utf8.Valid(notUTF8) || len(notUTF8) != 19 {
		t.Fatal("test value must be 19 bytes of invalid UTF-8")
	}
	f := newFixture(t, servertest.Options{})
	ctx := context.Background()
	in := api.NewSetSecretInput(f.repo, "RAW", "", notUTF8)
	if in.Value != "" || !bytes.Equal(in.ValueBytes, notUTF8) {
		t.Fatalf("NewSetSecretInput put a non-UTF-8 value in %+v, want valueBytes", in)
	}
	if err := f.alice().Procedure(ctx, api.MethodSetSecret, in, nil); err != nil {
		t.Fatal(err)
	}
	if err := f.alice().Procedure(ctx, api.MethodSetSecret, api.NewSetSecretInput(f.repo, "TEXT", "", []byte("plain-text-value")), nil); err != nil {
		t.Fatal(err)
	}
	queueOne(t, f, "secrets: [RAW, TEXT]\n")
	r := f.RegisterRunner(t, f.repo, "r1", nil, true)
	c := claim(t, r, 0)
	if c == nil {
		t.Fatal("no run claimed")
	}
	check := func(what string, c *api.ClaimedRun) {
		t.Helper()
		got := c.SecretValues()
		if raw := got["RAW"]; raw != string(notUTF8) {
			t.Errorf("%s: RAW = %q (%d bytes), want %q (%d bytes)", what, raw, len(raw), notUTF8, len(notUTF8))
		}
		if got["TEXT"] != "plain-text-value" || c.Secrets["TEXT"] != "plain-text-value" {
			t.Errorf("%s: a valid UTF-8 value must stay in secrets (for older runners): %+v", what, c)
		}
		if _, ok := c.Secrets["RAW"]; ok {
			t.Errorf("%s: a non-UTF-8 value was sent as a JSON string too", what)
		}
	}
	check("claim", c)
	r.StartSession(t)
	var resumed api.ClaimedRun
	procedure(t, r, api.MethodResumeRun, api.RunRef{Run: c.Run.ID}, &resumed)
	check("resume", &resumed)
}

// A NUL byte was accepted, and then every run using the secret ended
// errored (executor): an environment variable cannot hold NUL. It is
// refused at set, whichever field carries it.
func TestSetSecret_NULValueIsRefusedSayingWhy(t *testing.T) {
	t.Parallel()
	f := newFixture(t, servertest.Options{})
	ctx := context.Background()
	const msg = "secret TOKEN: the value holds a NUL byte (at byte 5 of 11): an environment variable cannot hold NUL, so no step could receive it; remove it or encode the value (e.g. base64)"
	err := f.alice().Procedure(ctx, api.MethodSetSecret, api.SetSecretInput{Repo: f.repo, Name: "TOKEN", Value: "hello\x00world"}, nil)
	wantError(t, "NUL in value", err, http.StatusBadRequest, api.ErrInvalidRequest, msg)
	err = f.alice().Procedure(ctx, api.MethodSetSecret, api.SetSecretInput{Repo: f.repo, Name: "TOKEN", ValueBytes: []byte("hello\x00world")}, nil)
	wantError(t, "NUL in valueBytes", err, http.StatusBadRequest, api.ErrInvalidRequest, msg)
	err = f.alice().Procedure(ctx, api.MethodSetSecret, api.SetSecretInput{Repo: f.repo, Name: "TOKEN", Value: "a", ValueBytes: []byte("b")}, nil)
	wantError(t, "both value and valueBytes", err, http.StatusBadRequest, api.ErrInvalidRequest,
		"secret TOKEN: give the value in value or in valueBytes, not both")
	var list api.ListSecretsOutput
	if err := f.alice().Query(ctx, api.MethodListSecrets, map[string][]string{"repo": {f.repo}}, &list); err != nil {
		t.Fatal(err)
	}
	if len(list.Secrets) != 0 {
		t.Errorf("secrets after the refused sets: %+v, want none", list.Secrets)
	}
}
