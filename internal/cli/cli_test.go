package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
)

// result is what one in-process run of the CLI produced.
type result struct {
	code           int
	stdout, stderr string
}

// env is a fake process environment for App.Getenv.
type env map[string]string

func (e env) get(k string) string { return e[k] }

// runCLI runs the CLI in-process with stdin, the environment e (nothing
// from the test process) and working directory dir.
func runCLI(t *testing.T, e env, dir string, stdin io.Reader, args ...string) result {
	t.Helper()
	var out, errb bytes.Buffer
	if stdin == nil {
		stdin = strings.NewReader("")
	}
	a := &App{Stdin: stdin, Stdout: &out, Stderr: &errb, Getenv: e.get, Dir: dir}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	code := a.Run(ctx, args)
	return result{code, out.String(), errb.String()}
}

// isolatedEnv points the config at a fresh temp dir and sets nothing else.
func isolatedEnv(t *testing.T) env {
	return env{"HOME": t.TempDir(), "XDG_CONFIG_HOME": t.TempDir()}
}

func TestExitCode_UnknownCommandAndFlagAreUsageErrors(t *testing.T) {
	e := isolatedEnv(t)
	for _, args := range [][]string{
		{"frobnicate"},
		{"run", "lsit"},
		{"run", "list", "--bogus"},
		{"run", "show"},
		{"run", "show", "abc"},
		{"run", "show", "1", "2"},
		{"secret", "set"},
		{"run", "logs"},
		{"run", "logs", "1", "--latest"},
		{"run", "logs", "1", "--json"},
	} {
		r := runCLI(t, e, "", nil, args...)
		if r.code != ExitUsage {
			t.Errorf("%q: exit %d, want %d (stderr %q)", args, r.code, ExitUsage, r.stderr)
		}
		if n := strings.Count(r.stderr, "\n"); n != 1 || !strings.HasPrefix(r.stderr, "knotless: ") {
			t.Errorf("%q: stderr is not one knotless: line: %q", args, r.stderr)
		}
	}
	if r := runCLI(t, e, "", nil, "run", "lsit"); !strings.Contains(r.stderr, "did you mean list") {
		t.Errorf("no suggestion for a typo: %q", r.stderr)
	}
}

func TestExitCode_NotLoggedInIs4AndSaysToLogIn(t *testing.T) {
	e := isolatedEnv(t)
	for _, args := range [][]string{{"whoami"}, {"repo", "list"}, {"run", "show", "1"}, {"secret", "list", "--repo", "a/b"}} {
		r := runCLI(t, e, "", nil, args...)
		if r.code != ExitAuth {
			t.Errorf("%q: exit %d, want %d", args, r.code, ExitAuth)
		}
		if !strings.Contains(r.stderr, "knotless login --server URL") {
			t.Errorf("%q: stderr does not say how to log in: %q", args, r.stderr)
		}
	}
}

func TestExitCode_ServerDownIs3(t *testing.T) {
	// A port that was just free: nothing listens there.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	e := isolatedEnv(t)
	e[EnvServer] = "http://" + addr
	e[EnvToken] = "some-token"
	r := runCLI(t, e, "", nil, "repo", "list")
	if r.code != ExitUnavailable {
		t.Fatalf("exit %d, want %d (stderr %q)", r.code, ExitUnavailable, r.stderr)
	}
	if !strings.Contains(r.stderr, "cannot reach the server at http://"+addr) {
		t.Errorf("stderr does not name the server: %q", r.stderr)
	}
}

func TestConfig_EnvOverridesFileAndSaveIsPrivate(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "sub", "config.json")
	if err := SaveConfig(path, Config{Server: "http://file.example", Token: "file-token"}); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("config mode %04o, want 0600", fi.Mode().Perm())
	}
	if di, _ := os.Stat(filepath.Dir(path)); di.Mode().Perm() != 0o700 {
		t.Errorf("config dir mode %04o, want 0700", di.Mode().Perm())
	}
	noWarn := func(m string) { t.Errorf("unexpected warning %q", m) }
	c, err := resolveConfig(path, env{}.get, noWarn)
	if err != nil || c.Server != "http://file.example" || c.Token != "file-token" {
		t.Fatalf("from file: %+v, %v", c, err)
	}
	c, err = resolveConfig(path, env{EnvServer: "http://env.example/", EnvToken: "env-token"}.get, noWarn)
	if err != nil || c.Server != "http://env.example" || c.Token != "env-token" {
		t.Fatalf("env does not override file: %+v, %v", c, err)
	}
	// A missing file is no error; a broken one is.
	if c, err := LoadConfig(filepath.Join(dir, "none.json")); err != nil || c != (Config{}) {
		t.Errorf("missing file: %+v, %v", c, err)
	}
	os.WriteFile(filepath.Join(dir, "bad.json"), []byte("{"), 0o600)
	if _, err := LoadConfig(filepath.Join(dir, "bad.json")); err == nil {
		t.Error("a malformed config loaded without error")
	}
}

func TestConfig_WorldReadableFileWarns(t *testing.T) {
	path := filepath.Join(t.TempDir(), "config.json")
	if err := SaveConfig(path, Config{Server: "http://x", Token: "t"}); err != nil {
		t.Fatal(err)
	}
	os.Chmod(path, 0o644)
	var warned string
	if _, err := resolveConfig(path, env{}.get, func(m string) { warned = m }); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(warned, "chmod 600") {
		t.Errorf("no warning about a readable token file: %q", warned)
	}
}

func TestConfigPath_XDGThenHomeThenFlag(t *testing.T) {
	p, _ := ConfigPath("", env{"XDG_CONFIG_HOME": "/x", "HOME": "/h"}.get)
	if p != "/x/knotless/config.json" {
		t.Errorf("XDG: %s", p)
	}
	p, _ = ConfigPath("", env{"HOME": "/h"}.get)
	if p != "/h/.config/knotless/config.json" {
		t.Errorf("HOME: %s", p)
	}
	p, _ = ConfigPath("/c.json", env{"XDG_CONFIG_HOME": "/x"}.get)
	if p != "/c.json" {
		t.Errorf("flag: %s", p)
	}
	if _, err := ConfigPath("", env{}.get); err == nil {
		t.Error("no HOME and no XDG_CONFIG_HOME gave a path")
	}
}

func TestLogin_RefusesTokenAsArgumentAndNeedsServer(t *testing.T) {
	e := isolatedEnv(t)
	if r := runCLI(t, e, "", nil, "login", "--server", "http://x", "--token", "abc"); r.code != ExitUsage {
		t.Errorf("--token flag accepted: exit %d", r.code)
	}
	if r := runCLI(t, e, "", nil, "login", "--server", "http://x", "abc"); r.code != ExitUsage {
		t.Errorf("token as argument accepted: exit %d", r.code)
	}
	if r := runCLI(t, e, "", strings.NewReader("tok\n"), "login"); r.code != ExitUsage || !strings.Contains(r.stderr, "--server") {
		t.Errorf("login without server: exit %d, %q", r.code, r.stderr)
	}
	if r := runCLI(t, e, "", strings.NewReader("tok\n"), "login", "--server", "ci.example.com"); r.code != ExitUsage {
		t.Errorf("server without scheme: exit %d, %q", r.code, r.stderr)
	}
	if r := runCLI(t, e, "", strings.NewReader("  \n"), "login", "--server", "http://127.0.0.1:1"); r.code != ExitUsage || !strings.Contains(r.stderr, "no token") {
		t.Errorf("empty stdin token: exit %d, %q", r.code, r.stderr)
	}
}

func TestHelp_EveryCommandHasHelpWithExamples(t *testing.T) {
	s := &session{app: &App{}, getenv: env{}.get, now: time.Now}
	root := s.newRoot()
	for _, c := range allCommands(root) {
		if c.Hidden || c.Name() == "help" || c.Name() == "completion" || c.Parent() != nil && c.Parent().Name() == "completion" {
			continue
		}
		if c.Short == "" {
			t.Errorf("%s: no Short help", c.CommandPath())
		}
		if c.Runnable() && !c.HasSubCommands() && c.Example == "" {
			t.Errorf("%s: no Example", c.CommandPath())
		}
	}
	r := runCLI(t, env{}, "", nil, "--help")
	for _, want := range []string{"Exit codes:", "KNOTLESS_SERVER", "KNOTLESS_TOKEN", "KNOTLESS_REPO"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("root --help lacks %q", want)
		}
	}
}

func TestOutput_CompactTimes(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		d    time.Duration
		want string
	}{{2 * time.Second, "just now"}, {42 * time.Second, "42s ago"}, {5 * time.Minute, "5m ago"}, {3 * time.Hour, "3h ago"}, {72 * time.Hour, "3d ago"}} {
		if got := ago(now.Add(-c.d), now); got != c.want {
			t.Errorf("ago(-%s) = %q, want %q", c.d, got, c.want)
		}
	}
	for _, c := range []struct {
		d    time.Duration
		want string
	}{{850 * time.Millisecond, "850ms"}, {12 * time.Second, "12s"}, {83 * time.Second, "1m23s"}, {2*time.Hour + 5*time.Minute, "2h05m"}} {
		if got := compact(c.d); got != c.want {
			t.Errorf("compact(%s) = %q, want %q", c.d, got, c.want)
		}
	}
	if got := size(1536); got != "1.5 KiB" {
		t.Errorf("size(1536) = %q", got)
	}
}

// decodeJSON fails the test unless s is one JSON value.
func decodeJSON(t *testing.T, s string, v any) {
	t.Helper()
	if err := json.Unmarshal([]byte(s), v); err != nil {
		t.Fatalf("output is not JSON: %v\n%s", err, s)
	}
}

// allCommands lists c and every command below it.
func allCommands(c *cobra.Command) []*cobra.Command {
	out := []*cobra.Command{c}
	for _, sub := range c.Commands() {
		out = append(out, allCommands(sub)...)
	}
	return out
}

// A token with a line break in it (a file holding a command's whole
// output, used as KNOTLESS_TOKEN) is a usage error naming where it came
// from, and the token is not printed. Pins: "cannot reach the server:
// net/http: invalid header field value for Authorization", exit 3, which
// sent the user looking at their network.
func TestToken_WithALineBreakIsAUsageErrorNamingWhereItCameFrom(t *testing.T) {
	e := isolatedEnv(t)
	e[EnvServer] = "http://127.0.0.1:1"
	e[EnvToken] = "Account alice created.\nkn_secretpart"
	r := runCLI(t, e, t.TempDir(), nil, "run", "list", "--repo", "alice/app")
	if r.code != ExitUsage || !strings.Contains(r.stderr, "the API token from KNOTLESS_TOKEN is not one token: it has a space or a line break at character 8") {
		t.Fatalf("exit %d, stderr %q", r.code, r.stderr)
	}
	if strings.Contains(r.stderr, "kn_secretpart") {
		t.Errorf("the error prints the token: %q", r.stderr)
	}
}
