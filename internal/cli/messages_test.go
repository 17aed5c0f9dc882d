package cli

import (
	"fmt"
	"strings"
	"testing"

	"knotless.dev/knotless/internal/api"
)

// TestErrors_ServerMessageOnceWithHintOnlyWhenItAddsSomething pins messages
// like "Forbidden: only admins create accounts: not allowed: ask the
// repository owner or an admin" and "Conflict: ... taken by another key:
// conflict": the server's message is printed once, without the XRPC error
// name, and a hint only when the message lacks what it says.
func TestErrors_ServerMessageOnceWithHintOnlyWhenItAddsSomething(t *testing.T) {
	apiErr := func(status int, name, msg string) *api.Error {
		return &api.Error{Status: status, Name: name, Message: msg}
	}
	for _, c := range []struct {
		name string
		err  error
		ctx  errContext
		code int
		want string
	}{
		{"account forbidden: no repository hint",
			fmt.Errorf("create account dave: %w", apiErr(403, api.ErrForbidden, "only admins create accounts")),
			errContext{ranCommand: true}, ExitAuth,
			"create account dave: only admins create accounts"},
		{"repository forbidden: hint names the repository",
			fmt.Errorf("list secrets of bob/app: %w", apiErr(403, api.ErrForbidden, "you cannot see bob/app's secrets")),
			errContext{ranCommand: true, repo: "bob/app"}, ExitAuth,
			"list secrets of bob/app: you cannot see bob/app's secrets: ask an owner of bob/app or an admin"},
		{"repository forbidden: the message names who may already",
			fmt.Errorf("list secrets of bob/app: %w", apiErr(403, api.ErrForbidden, "only an owner of bob/app or an admin may list its secrets")),
			errContext{ranCommand: true, repo: "bob/app"}, ExitAuth,
			"list secrets of bob/app: only an owner of bob/app or an admin may list its secrets"},
		{"conflict: no error name, no trailing repeat",
			fmt.Errorf("approve runner b of a/b: %w", apiErr(409, api.ErrConflict, `runner name "builder-1" is taken by another key: conflict`)),
			errContext{ranCommand: true}, ExitFailed,
			`approve runner b of a/b: runner name "builder-1" is taken by another key`},
		{"refused token: one login hint",
			fmt.Errorf("list repositories: %w", apiErr(401, api.ErrInvalidToken, "unknown API token")),
			errContext{ranCommand: true, server: "http://127.0.0.1:8080"}, ExitAuth,
			"list repositories: unknown API token: log in again with a valid token: knotless login --server http://127.0.0.1:8080"},
		{"refused token: the message says how already",
			fmt.Errorf("list repositories: %w", apiErr(401, api.ErrInvalidToken, "The API token is unknown. Log in again with knotless login.")),
			errContext{ranCommand: true}, ExitAuth,
			"list repositories: The API token is unknown. Log in again with knotless login."},
		{"full sentence: the hint is a sentence too",
			fmt.Errorf("list runs: %w", apiErr(500, api.ErrInternal, "The database is locked.")),
			errContext{ranCommand: true}, ExitUnavailable,
			"list runs: The database is locked. The server failed: try again, or check the server's log."},
		{"server error that points at its log: no hint",
			fmt.Errorf("list runs: %w", apiErr(500, api.ErrInternal, "internal error; see the server log")),
			errContext{ranCommand: true}, ExitUnavailable,
			"list runs: internal error; see the server log"},
		{"no message: name and status stay",
			fmt.Errorf("list runs: %w", apiErr(404, api.ErrNotFound, "")),
			errContext{ranCommand: true}, ExitNotFound,
			"list runs: NotFound (HTTP 404)"},
	} {
		code, msg := classify(c.err, c.ctx)
		if code != c.code || msg != c.want {
			t.Errorf("%s:\n got %d %q\nwant %d %q", c.name, code, msg, c.code, c.want)
		}
	}
}

// TestLogin_ServerWithoutSchemeSaysWhatToWrite pins the raw Go error "not a
// URL: parse ...: first path segment in URL cannot contain colon".
func TestLogin_ServerWithoutSchemeSaysWhatToWrite(t *testing.T) {
	const want = "knotless: server URL must start with http:// or https:// — did you mean http://127.0.0.1:18480?"
	r := runCLI(t, isolatedEnv(t), "", strings.NewReader("tok\n"), "login", "--server", "127.0.0.1:18480")
	if r.code != ExitUsage || strings.TrimSpace(r.stderr) != want {
		t.Errorf("login --server 127.0.0.1:18480: exit %d, stderr %q", r.code, r.stderr)
	}
	e := isolatedEnv(t).with(EnvServer, "127.0.0.1:18480", EnvToken, "tok")
	r = runCLI(t, e, "", nil, "whoami")
	if r.code != ExitUsage || !strings.HasPrefix(r.stderr, want) || !strings.Contains(r.stderr, EnvServer) {
		t.Errorf("KNOTLESS_SERVER=127.0.0.1:18480 whoami: exit %d, stderr %q", r.code, r.stderr)
	}
	for server, guess := range map[string]string{
		"ci.example.com":      "https://ci.example.com",
		"localhost:8080/ci":   "http://localhost:8080/ci",
		"[::1]:8080":          "http://[::1]:8080",
		"ci.example.com:8443": "https://ci.example.com:8443",
	} {
		r := runCLI(t, isolatedEnv(t), "", strings.NewReader("tok\n"), "login", "--server", server)
		if r.code != ExitUsage || !strings.Contains(r.stderr, "did you mean "+guess+"?") {
			t.Errorf("login --server %s: exit %d, stderr %q", server, r.code, r.stderr)
		}
	}
	r = runCLI(t, isolatedEnv(t), "", strings.NewReader("tok\n"), "login", "--server", "ftp://ci.example.com")
	if r.code != ExitUsage || !strings.Contains(r.stderr, "must start with http:// or https://") {
		t.Errorf("login --server ftp://...: exit %d, stderr %q", r.code, r.stderr)
	}
}

// TestHelp_UnknownSubcommandWithHelpIsUsageError pins `knotless account
// list --help` printing account's help with exit 0.
func TestHelp_UnknownSubcommandWithHelpIsUsageError(t *testing.T) {
	r := runCLI(t, isolatedEnv(t), "", nil, "account", "list", "--help")
	if r.code != ExitUsage || !strings.Contains(r.stderr, `unknown command "list" for "knotless account"`) || r.stdout != "" {
		t.Errorf("account list --help: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	r = runCLI(t, isolatedEnv(t), "", nil, "runner", "aprove", "--help")
	if r.code != ExitUsage || !strings.Contains(r.stderr, "did you mean approve?") {
		t.Errorf("runner aprove --help: exit %d, stderr %q", r.code, r.stderr)
	}
	r = runCLI(t, isolatedEnv(t), "", nil, "account", "--help")
	if r.code != ExitOK || !strings.Contains(r.stdout, "create") {
		t.Errorf("account --help: exit %d, stdout %q", r.code, r.stdout)
	}
	r = runCLI(t, isolatedEnv(t), "", nil, "run", "logs", "--help")
	if r.code != ExitOK || !strings.Contains(r.stdout, "Examples:") {
		t.Errorf("run logs --help: exit %d, stdout %q", r.code, r.stdout)
	}
}

func TestRunLogs_NoSuchStepCountsStepsInGoodEnglish(t *testing.T) {
	for total, want := range map[int]string{
		0: "run 5 has no step 7 (it has 0 steps; 0 is the setup log)",
		1: "run 5 has no step 7 (it has 1 step; 0 is the setup log)",
		2: "run 5 has no step 7 (it has 2 steps; 0 is the setup log)",
	} {
		if got := noStepError(5, 7, total).Error(); got != want {
			t.Errorf("%d steps: %q, want %q", total, got, want)
		}
	}
}

func TestOutput_StateTextDoesNotRepeatTheState(t *testing.T) {
	for _, c := range [][3]string{
		{api.StateCancelled, api.ReasonCancelled, "cancelled"},
		{api.StateCancelled, api.ReasonRunnerStopped, "cancelled (runner-stopped)"},
		{api.StateFailed, api.ReasonTimeout, "failed (timeout)"},
		{api.StateSucceeded, "", "succeeded"},
	} {
		if got := stateText(c[0], c[1]); got != c[2] {
			t.Errorf("stateText(%q, %q) = %q, want %q", c[0], c[1], got, c[2])
		}
	}
}

func TestShortDID_KeepsMethodStartAndEnd(t *testing.T) {
	did := "did:key:zDnaeTQ4Bu6Tk5cMpPhVmfPGuJYFpbZ8xbbzTRHTAjkiKn4aa"
	if got, want := shortDID(did), "did:key:zDnaeT…iKn4aa"; got != want {
		t.Errorf("shortDID = %q, want %q", got, want)
	}
	if got := shortDID("did:web:ci.example.com"); got != "did:web:ci.example.com" {
		t.Errorf("short DID changed: %q", got)
	}
}
