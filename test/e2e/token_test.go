package e2e

import (
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestE2E_TokenCreateUseRevokeRefused makes a named token with the real
// knotless CLI, uses it for the API and for git against the real server,
// revokes it, and sees both refused at once; then does the same for a
// disabled account.
func TestE2E_TokenCreateUseRevokeRefused(t *testing.T) {
	w := newWorld(t, time.Minute)
	admin := w.token
	as := func(tok string, f func()) {
		w.token = tok
		defer func() { w.token = admin }()
		f()
	}
	lsRemote := func() (string, error) {
		cmd := exec.Command("git", "ls-remote", w.url+"/"+w.repo+".git")
		cmd.Env = w.gitEnv()
		out, err := cmd.CombinedOutput()
		return string(out), err
	}

	res := w.cli("", "token", "create", "ci", "--expires", "1d")
	if res.code != 0 {
		t.Fatalf("token create: exit %d\n%s", res.code, res.stderr)
	}
	tok := strings.TrimSpace(res.stdout)
	if !strings.HasPrefix(tok, "knl_") || !strings.Contains(res.stderr, "shown only this once") {
		t.Fatalf("token create: stdout %q stderr %q", res.stdout, res.stderr)
	}
	as(tok, func() {
		if out := w.cliOK("", "whoami"); !strings.HasPrefix(out, "admin (admin)") {
			t.Errorf("whoami with the new token:\n%s", out)
		}
		if out, err := lsRemote(); err != nil {
			t.Fatalf("git ls-remote with the new token: %v\n%s", err, out)
		}
	})
	list := w.cliOK("", "token", "list")
	if !strings.Contains(list, "ci") || !strings.Contains(list, "initial *") || strings.Contains(list, "knl_") {
		t.Errorf("token list:\n%s", list)
	}

	w.cliOK("", "token", "revoke", "ci")
	as(tok, func() {
		res := w.cli("", "whoami")
		if res.code != 4 || !strings.Contains(res.stderr, "revoked") {
			t.Errorf("whoami with the revoked token: exit %d, stderr %q", res.code, res.stderr)
		}
		if out, err := lsRemote(); err == nil {
			t.Errorf("git ls-remote with the revoked token worked:\n%s", out)
		}
	})
	if res := w.cli("", "token", "revoke", "initial"); res.code != 1 || !strings.Contains(res.stderr, "last") {
		t.Errorf("revoking the last token: exit %d, stderr %q", res.code, res.stderr)
	}

	// A disabled account: its token is refused by the API and by git.
	out := w.cliOK("", "account", "create", "bob", "--admin", "--json")
	i := strings.Index(out, `"token": "`)
	if i < 0 {
		t.Fatalf("account create --json:\n%s", out)
	}
	bob := out[i+len(`"token": "`):]
	bob = bob[:strings.Index(bob, `"`)]
	w.cliOK("", "account", "disable", "bob")
	as(bob, func() {
		res := w.cli("", "whoami")
		if res.code != 4 || !strings.Contains(res.stderr, "disabled") {
			t.Errorf("whoami of the disabled account: exit %d, stderr %q", res.code, res.stderr)
		}
		if out, err := lsRemote(); err == nil {
			t.Errorf("git ls-remote of the disabled account worked:\n%s", out)
		}
	})
	w.cliOK("", "account", "enable", "bob")
	as(bob, func() { w.cliOK("", "whoami") })
}
