package cli

import (
	"bytes"
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"knotless.dev/knotless/internal/api"
)

// optionsSession is the session App.Run would make for env e, on buffers
// and a fixed clock: all a command's options need, without cobra.
func optionsSession(e env, stdin io.Reader, now time.Time) (s *session, stdout, stderr *bytes.Buffer) {
	stdout, stderr = &bytes.Buffer{}, &bytes.Buffer{}
	if stdin == nil {
		stdin = strings.NewReader("")
	}
	a := &App{Stdin: stdin, Stdout: stdout, Stderr: stderr, Getenv: e.get, Now: func() time.Time { return now }}
	return &session{app: a, getenv: e.get, now: a.Now}, stdout, stderr
}

// TestOptions_ValidateRefusesWithTheCommandsOwnError: for each bad value or
// combination, complete and validate alone (no cobra, no server: the one
// configured is not listening) return the error the command prints, and
// classify gives it the command's exit code. The options are literals, as
// a caller outside cobra would write them.
func TestOptions_ValidateRefusesWithTheCommandsOwnError(t *testing.T) {
	e := isolatedEnv(t).with(EnvServer, "http://127.0.0.1:1", EnvToken, "t")
	for _, c := range []struct {
		o     options
		args  []string // the options' positional arguments
		stdin string
		cli   []string // the command line that should give the same error
		json  bool     // --json (the session's)
	}{
		{&runnerTokenOptions{Repo: "a/b", Expires: 0, Uses: 1}, nil, "", []string{"runner", "token", "--repo", "a/b", "--expires", "0s"}, false},
		{&runnerTokenOptions{Repo: "a/b", Expires: time.Hour, Uses: 0}, nil, "", []string{"runner", "token", "--repo", "a/b", "--uses", "0"}, false},
		{&runnerApproveOptions{Repo: "a/b", DID: "zDnae", DIDGiven: true}, []string{"r"}, "", []string{"runner", "approve", "r", "--repo", "a/b", "--did", "zDnae"}, false},
		{&runnerApproveOptions{Repo: "a/b", DID: " ", DIDGiven: true}, []string{"r"}, "", []string{"runner", "approve", "r", "--repo", "a/b", "--did", " "}, false},
		{&tokenCreateOptions{Expires: "0d"}, []string{"laptop"}, "", []string{"token", "create", "laptop", "--expires", "0d"}, false},
		// A bad name is told before a bad --expires, as the command does.
		{&tokenCreateOptions{Expires: "0d"}, []string{"bad/name"}, "", []string{"token", "create", "bad/name", "--expires", "0d"}, false},
		{&accountToggleOptions{Disable: true}, []string{"Bad_Handle!"}, "", []string{"account", "disable", "Bad_Handle!"}, false},
		{&secretSetOptions{Repo: "a/b"}, []string{"TOKEN"}, "hello\x00world\n", []string{"secret", "set", "TOKEN", "--repo", "a/b"}, false},
		{&repoCreateOptions{}, []string{"a/b/c"}, "", []string{"repo", "create", "a/b/c"}, false},
		{&loginOptions{Server: "ftp://x"}, nil, "", []string{"login", "--server", "ftp://x"}, false},
		{&runListOptions{Pipeline: "x"}, nil, "", []string{"run", "list", "--pipeline", "x"}, false},
		// run trigger checks its flags before it looks for a repository.
		{&runTriggerOptions{Ref: "main~5"}, nil, "", []string{"run", "trigger", "--ref", "main~5"}, false},
		{&runTriggerOptions{Follow: true}, nil, "", []string{"run", "trigger", "--json", "-f"}, true},
		{&runRerunOptions{Pipeline: "4"}, []string{"3"}, "", []string{"run", "rerun", "3", "--pipeline", "4"}, false},
		{&runLogsOptions{Latest: true, StepSet: true}, nil, "", []string{"run", "logs", "--latest", "--step", "0"}, false},
		{&runLogsOptions{After: 3, AfterSet: true}, []string{"1"}, "", []string{"run", "logs", "1", "--after", "3"}, false},
	} {
		name := strings.Join(c.cli, " ")
		s, stdout, stderr := optionsSession(e, strings.NewReader(c.stdin), time.Now())
		s.jsonOut = c.json
		err := c.o.complete(context.Background(), s, c.args)
		if err != nil {
			t.Fatalf("%s: complete: %v", name, err)
		}
		err = c.o.validate()
		if err == nil {
			t.Errorf("%s: validate accepted %+v", name, c.o)
			continue
		}
		if stdout.Len()+stderr.Len() > 0 {
			t.Errorf("%s: complete or validate printed %q %q", name, stdout, stderr)
		}
		code, msg := classify(err, errContext{ranCommand: true})
		r := runCLI(t, e, "", strings.NewReader(c.stdin), c.cli...)
		if want := "knotless: " + msg + "\n"; r.stderr != want || r.code != code {
			t.Errorf("%s: validate says exit %d %q; the command says exit %d %q", name, code, want, r.code, r.stderr)
		}
	}
}

// TestOptions_RunWithoutCobraPrintsWhatTheCommandPrints: against a real
// server (in-process), a command's options called directly (execute, or
// validate and run on a literal) do what the command does and print the
// same bytes, for runner, secret and token commands.
func TestOptions_RunWithoutCobraPrintsWhatTheCommandPrints(t *testing.T) {
	srv, e := serverEnv(t)
	// Ten days on, every time shown is "10d ago" in both runs, whichever
	// minute each request fell in.
	now := time.Now().Add(10*24*time.Hour + time.Hour)
	ctx := context.Background()
	mustRun(t, e, ExitOK, nil, "repo", "create", "app")
	rn := srv.RegisterRunner(t, "admin/app", "build-1", []string{"linux"}, false)

	// secret set with the value given as a field: no stdin, no prompt.
	s, stdout, stderr := optionsSession(e, nil, now)
	set := &secretSetOptions{Runner: "build-1", name: "DEPLOY_KEY", repo: "admin/app", value: []byte("s3cret-value")}
	if err := set.validate(); err != nil {
		t.Fatal(err)
	}
	if err := set.run(ctx, s); err != nil {
		t.Fatalf("secret set: %v (stderr %q)", err, stderr)
	}
	if want := "Set secret DEPLOY_KEY of admin/app for runner build-1 (12 bytes).\n"; stdout.String() != want {
		t.Errorf("secret set printed %q, want %q", stdout, want)
	}

	// runner approve through execute, as runE calls it.
	s, stdout, _ = optionsSession(e, nil, now)
	if err := execute(ctx, s, &runnerApproveOptions{Repo: "app", DID: rn.DID, DIDGiven: true}, []string{"build-1"}); err != nil {
		t.Fatalf("runner approve: %v", err)
	}
	if !strings.Contains(stdout.String(), "Approved runner build-1 of admin/app ("+rn.DID) {
		t.Errorf("runner approve printed %q", stdout)
	}

	for _, c := range []struct {
		o    options
		cli  []string
		want string // a part of what both print
	}{
		{&runnerListOptions{Repo: "admin/app"}, []string{"runner", "list", "--repo", "admin/app"}, "approved"},
		{&secretListOptions{Repo: "admin/app"}, []string{"secret", "list", "--repo", "admin/app"}, "DEPLOY_KEY"},
		{&tokenListOptions{}, []string{"token", "list"}, "initial *"},
	} {
		name := strings.Join(c.cli, " ")
		s, stdout, stderr := optionsSession(e, nil, now)
		if err := execute(ctx, s, c.o, nil); err != nil {
			t.Fatalf("%s without cobra: %v", name, err)
		}
		a := &App{Stdin: strings.NewReader(""), Stdout: &bytes.Buffer{}, Stderr: &bytes.Buffer{}, Getenv: e.get, Now: func() time.Time { return now }}
		if code := a.Run(ctx, c.cli); code != ExitOK {
			t.Fatalf("%s: exit %d: %s", name, code, a.Stderr)
		}
		if got, want := stdout.String()+stderr.String(), a.Stdout.(*bytes.Buffer).String()+a.Stderr.(*bytes.Buffer).String(); got != want {
			t.Errorf("%s: without cobra printed\n%s\nthe command printed\n%s", name, got, want)
		}
		if !strings.Contains(stdout.String(), c.want) {
			t.Errorf("%s printed %q, want it to hold %q", name, stdout, c.want)
		}
	}

	// --json is the session's: the options print the API's object.
	s, stdout, _ = optionsSession(e, nil, now)
	s.jsonOut = true
	if err := execute(ctx, s, &runnerRemoveOptions{Repo: "admin/app"}, []string{"build-1"}); err != nil {
		t.Fatal(err)
	}
	var ref api.RunnerRef
	decodeJSON(t, stdout.String(), &ref)
	if ref.Repo != "admin/app" || ref.Name != "build-1" {
		t.Errorf("runner remove --json printed %+v", ref)
	}
}
