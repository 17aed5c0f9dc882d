package cli

import (
	"strings"
	"testing"
	"time"
)

func TestParseExpiry_DaysWeeksAndDurations(t *testing.T) {
	for in, want := range map[string]time.Duration{"30d": 30 * 24 * time.Hour, "2w": 14 * 24 * time.Hour, "12h": 12 * time.Hour, "90m": 90 * time.Minute} {
		if got, err := parseExpiry(in); err != nil || got != want {
			t.Errorf("parseExpiry(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "0d", "-3d", "d", "abc", "-1h", "999999d"} {
		if _, err := parseExpiry(bad); err == nil {
			t.Errorf("parseExpiry(%q) accepted", bad)
		}
	}
}

func TestToken_CreatePrintsTokenAloneOnStdoutAndRevokeRefusesItAtOnce(t *testing.T) {
	_, e := serverEnv(t)
	r := mustRun(t, e, 0, nil, "token", "create", "ci", "--expires", "30d")
	tok := strings.TrimSpace(r.stdout)
	if !strings.HasPrefix(tok, "knl_") || strings.Count(r.stdout, "\n") != 1 {
		t.Fatalf("stdout %q, want the token alone on one line", r.stdout)
	}
	if !strings.Contains(r.stderr, "shown only this once") || strings.Contains(r.stderr, tok) {
		t.Errorf("stderr %q", r.stderr)
	}
	ci := e.with(EnvToken, tok)
	mustRun(t, ci, 0, nil, "whoami")
	r = mustRun(t, ci, 0, nil, "token", "list")
	if !strings.Contains(r.stdout, "ci *") || !strings.Contains(r.stdout, "initial") || strings.Contains(r.stdout, "knl_") {
		t.Errorf("token list:\n%s", r.stdout)
	}
	mustRun(t, e, 0, nil, "token", "revoke", "ci")
	r = mustRun(t, ci, ExitAuth, nil, "whoami")
	if !strings.Contains(r.stderr, "revoked") {
		t.Errorf("whoami with the revoked token: %q", r.stderr)
	}
	r = mustRun(t, e, ExitFailed, nil, "token", "revoke", "initial")
	if !strings.Contains(r.stderr, "last") {
		t.Errorf("revoking the last token: %q", r.stderr)
	}
	mustRun(t, e, ExitUsage, nil, "token", "create", "x", "--expires", "soon")
}

func TestAccount_DisableRefusesTheAccountsTokensAndEnableRestoresThem(t *testing.T) {
	_, e := serverEnv(t)
	r := mustRun(t, e, 0, nil, "account", "create", "bob", "--json")
	i := strings.Index(r.stdout, `"token": "`)
	if i < 0 {
		t.Fatalf("account create --json: %s", r.stdout)
	}
	tok := r.stdout[i+len(`"token": "`):]
	tok = tok[:strings.Index(tok, `"`)]
	bob := e.with(EnvToken, tok)
	mustRun(t, bob, 0, nil, "whoami")
	r = mustRun(t, bob, ExitAuth, nil, "account", "disable", "admin")
	mustRun(t, e, 0, nil, "account", "disable", "bob")
	r = mustRun(t, bob, ExitAuth, nil, "whoami")
	if !strings.Contains(r.stderr, "disabled") {
		t.Errorf("whoami of a disabled account: %q", r.stderr)
	}
	mustRun(t, e, 0, nil, "account", "enable", "bob")
	mustRun(t, bob, 0, nil, "whoami")
}
