package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"knotless.dev/knotless/internal/oidc"
)

// rotate makes a new current key and keeps the old one published for
// --grace; list shows both; --grace 0 unpublishes the old key at once.
func TestOIDCKeys_RotateKeepsTheOldKeyForItsGraceAndListShowsBoth(t *testing.T) {
	dir := t.TempDir()
	kr, err := oidc.OpenKeyring(dir)
	if err != nil {
		t.Fatal(err)
	}
	first, _ := kr.Keys()
	run := func(args ...string) string {
		t.Helper()
		var out, errb bytes.Buffer
		if code := execute(context.Background(), args, &out, &errb); code != 0 {
			t.Fatalf("knotless-server %s: exit %d\n%s", strings.Join(args, " "), code, errb.String())
		}
		return out.String()
	}
	out := run("oidc-keys", "rotate", "--data", dir, "--grace", "2h")
	if !strings.Contains(out, "retired key "+first.Current().ID+", published until") {
		t.Fatalf("rotate printed:\n%s", out)
	}
	list := run("oidc-keys", "list", "--data", dir)
	if lines := strings.Split(strings.TrimSpace(list), "\n"); len(lines) != 3 || !strings.Contains(lines[1], "current") ||
		!strings.Contains(lines[2], first.Current().ID) || !strings.Contains(lines[2], "published until") {
		t.Fatalf("list:\n%s", list)
	}
	out = run("oidc-keys", "rotate", "--data", dir, "--grace", "0")
	if !strings.Contains(out, "unpublished now") {
		t.Fatalf("rotate --grace 0 printed:\n%s", out)
	}
	set, _ := kr.Keys()
	if n := len(set.JWKS(set.Current().Created).Keys); n != 2 {
		t.Errorf("%d keys published after a second rotation without grace, want the new one and the first (still in its grace)", n)
	}
}
