package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/envflag"
	"knotless.dev/knotless/internal/svcauth"
)

func TestEnvFallbacks_FlagWinsOverEnvironment(t *testing.T) {
	t.Setenv("KNOTLESS_LISTEN", "127.0.0.1:9999")
	t.Setenv("KNOTLESS_LEASE", "5s")
	cmd := newCommand()
	if err := cmd.ParseFlags([]string{"--lease", "7s"}); err != nil {
		t.Fatal(err)
	}
	if err := envflag.Apply(cmd.Flags()); err != nil {
		t.Fatal(err)
	}
	if v := cmd.Flags().Lookup("listen").Value.String(); v != "127.0.0.1:9999" {
		t.Errorf("listen = %s, want the environment's value", v)
	}
	if v := cmd.Flags().Lookup("lease").Value.String(); v != "7s" {
		t.Errorf("lease = %s, want the flag's value", v)
	}
	t.Setenv("KNOTLESS_LEASE", "soon")
	cmd = newCommand()
	if err := envflag.Apply(cmd.Flags()); err == nil || !strings.Contains(err.Error(), "KNOTLESS_LEASE") {
		t.Errorf("bad KNOTLESS_LEASE: err = %v, want one naming the variable", err)
	}
}

func TestHandoverGrace_FlagEnvironmentAndDefaultInHelp(t *testing.T) {
	t.Setenv("KNOTLESS_HANDOVER_GRACE", "2m")
	cmd := newCommand()
	if err := envflag.Apply(cmd.Flags()); err != nil {
		t.Fatal(err)
	}
	if v := cmd.Flags().Lookup("handover-grace").Value.String(); v != "2m0s" {
		t.Errorf("handover-grace = %s, want KNOTLESS_HANDOVER_GRACE's 2m0s", v)
	}
	var stdout, stderr strings.Builder
	if code := execute(context.Background(), []string{"--help"}, &stdout, &stderr); code != exitOK {
		t.Fatalf("--help: exit %d", code)
	}
	if !regexp.MustCompile(`--handover-grace duration .*\[env KNOTLESS_HANDOVER_GRACE\] \(default 5m0s\)`).MatchString(stdout.String()) {
		t.Errorf("--help does not show --handover-grace with its default and variable:\n%s", stdout.String())
	}
}

func TestServer_StartsServesAndStopsCleanlyOnSIGTERM(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the program")
	}
	data := filepath.Join(t.TempDir(), "data")
	cmd, lines, log, base := startServer(t, data)
	if !strings.Contains(strings.Join(log, "\n"), "admin token written to "+filepath.Join(data, "admin.token")) {
		t.Errorf("the log does not say where the admin token is:\n%s", strings.Join(log, "\n"))
	}
	// main writes server.url right after the server is ready.
	for start := time.Now(); ; {
		b, err := os.ReadFile(filepath.Join(data, URLFile))
		if err == nil && strings.TrimSpace(string(b)) == base {
			break
		}
		if time.Since(start) > 10*time.Second {
			t.Fatalf("%s = %q, %v; want %s", URLFile, b, err, base)
		}
		time.Sleep(20 * time.Millisecond)
	}
	tok, err := os.ReadFile(filepath.Join(data, "admin.token"))
	if err != nil {
		t.Fatal(err)
	}
	c := &api.Client{BaseURL: base, Auth: api.BearerToken(strings.TrimSpace(string(tok)))}
	var me api.Account
	if err := c.Query(context.Background(), api.MethodWhoAmI, nil, &me); err != nil || me.Handle != "admin" {
		t.Fatalf("whoami = %+v, %v", me, err)
	}
	for _, l := range log {
		if strings.Contains(l, strings.TrimSpace(string(tok))) {
			t.Fatalf("the log holds the admin token: %s", l)
		}
	}
	// A forged runner token is refused without a log line: anyone can
	// send them (indigo's validator logged one per token at INFO).
	var desc api.DescribeServerOutput
	if err := c.Query(context.Background(), api.MethodDescribeServer, nil, &desc); err != nil {
		t.Fatal(err)
	}
	key, _ := svcauth.GenerateKey()
	forger, _ := svcauth.GenerateKey()
	did, _ := svcauth.DIDKey(key)
	forged := &api.Client{BaseURL: base, Auth: (&svcauth.Signer{DID: did, Audience: desc.DID, Key: forger}).AuthFunc()}
	if err := forged.Procedure(context.Background(), api.MethodRegisterRunner, api.RegisterRunnerInput{}, nil); err == nil {
		t.Fatal("register with a forged token succeeded")
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	for l := range lines {
		log = append(log, l)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("exit after SIGTERM: %v\n%s", err, strings.Join(log, "\n"))
	}
	if _, err := os.Stat(filepath.Join(data, URLFile)); !os.IsNotExist(err) {
		t.Errorf("%s still exists after a clean stop (err %v)", URLFile, err)
	}
	if !strings.Contains(strings.Join(log, "\n"), "server stopped") {
		t.Errorf("no clean stop in the log:\n%s", strings.Join(log, "\n"))
	}
	for _, l := range log {
		if strings.Contains(l, "purging") || strings.Contains(l, did) {
			t.Errorf("a forged runner token made a log line: %s", l)
		}
	}
}

func TestLibraryLogs_GoToTheServerLogBelowWarnAtDebug(t *testing.T) {
	var b strings.Builder
	lib := slog.New(demoted{slog.NewTextHandler(&b, &slog.HandlerOptions{Level: slog.LevelInfo})})
	lib.Info("chatter")
	lib.With("k", "v").WithGroup("g").Warn("trouble")
	if out := b.String(); strings.Contains(out, "chatter") || !strings.Contains(out, "level=WARN msg=trouble k=v") {
		t.Errorf("at --log-level info, a library's info and warn lines gave:\n%s\nwant the warning only", out)
	}
}

var (
	buildOnce sync.Once
	builtBin  string
	buildErr  error
)

// serverBin builds the program once for the tests that run it as a process.
func serverBin(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds the program")
	}
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "knotless-server-test")
		if err != nil {
			buildErr = err
			return
		}
		builtBin = filepath.Join(dir, "knotless-server")
		if out, err := exec.Command("go", "build", "-o", builtBin, ".").CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return builtBin
}

func TestMain(m *testing.M) {
	code := m.Run()
	if builtBin != "" {
		os.RemoveAll(filepath.Dir(builtBin))
	}
	os.Exit(code)
}

// startServer runs knotless-server on data with --listen 127.0.0.1:0 until
// its "server ready" line and returns the process, its remaining stderr
// lines, the lines so far and its URL.
func startServer(t *testing.T, data string) (*exec.Cmd, chan string, []string, string) {
	t.Helper()
	cmd := exec.Command(serverBin(t), "--data", data, "--listen", "127.0.0.1:0")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	lines := make(chan string, 100)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	var log []string
	urlRE := regexp.MustCompile(`msg="server ready" url=(\S+)`)
	deadline := time.After(30 * time.Second)
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("server exited early:\n%s", strings.Join(log, "\n"))
			}
			log = append(log, l)
			if m := urlRE.FindStringSubmatch(l); m != nil {
				return cmd, lines, log, m[1]
			}
		case <-deadline:
			t.Fatalf("no ready line:\n%s", strings.Join(log, "\n"))
		}
	}
}

func TestServer_SecondStartOnSameDataFailsAndLeavesFirstsURLFile(t *testing.T) {
	data := filepath.Join(t.TempDir(), "data")
	first, _, _, base := startServer(t, data)
	urlFile := filepath.Join(data, URLFile)
	for start := time.Now(); ; {
		if b, err := os.ReadFile(urlFile); err == nil && strings.TrimSpace(string(b)) == base {
			break
		}
		if time.Since(start) > 10*time.Second {
			t.Fatalf("%s never held %s", URLFile, base)
		}
		time.Sleep(20 * time.Millisecond)
	}
	for _, listen := range []string{"127.0.0.1:0", strings.TrimPrefix(base, "http://")} {
		second := exec.Command(serverBin(t), "--data", data, "--listen", listen)
		out, err := second.CombinedOutput()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != exitError {
			t.Fatalf("second server (--listen %s): err = %v, want exit %d\n%s", listen, err, exitError, out)
		}
		want := fmt.Sprintf("data directory %s is in use by another knotless-server (pid %d)", data, first.Process.Pid)
		if !strings.Contains(string(out), want) {
			t.Errorf("second server (--listen %s) says:\n%s\nwant %q", listen, out, want)
		}
		if b, err := os.ReadFile(urlFile); err != nil || strings.TrimSpace(string(b)) != base {
			t.Fatalf("after the refused second start %s = %q, %v; want the first server's %s", URLFile, b, err, base)
		}
	}
	c := &api.Client{BaseURL: base}
	if err := c.Query(context.Background(), api.MethodDescribeServer, nil, nil); err != nil {
		t.Fatalf("first server after the refused second start: %v", err)
	}
}

func TestExecute_UsageErrorsExit2WithHint(t *testing.T) {
	t.Setenv("KNOTLESS_DATA", t.TempDir()) // nothing may start anyway
	for _, args := range [][]string{
		{"--bogus"},
		{"extra-arg"},
		{"--lease", "soon"},
		{"--handover-grace", "soon"},
		{"--log-level", "loud"},
		{"--url", "ci.example.com"},
		{"--url", "https://ci.example.com/?x=1"},
	} {
		var stdout, stderr strings.Builder
		code := execute(context.Background(), args, &stdout, &stderr)
		if code != exitUsage {
			t.Errorf("knotless-server %s: exit %d, want %d; stderr:\n%s", strings.Join(args, " "), code, exitUsage, stderr.String())
		}
		if !strings.HasSuffix(stderr.String(), "\nsee knotless-server --help\n") || strings.Count(stderr.String(), "\n") != 2 {
			t.Errorf("knotless-server %s: stderr = %q; want one line of error, then the --help hint", strings.Join(args, " "), stderr.String())
		}
	}
	var stdout, stderr strings.Builder
	if code := execute(context.Background(), []string{"--help"}, &stdout, &stderr); code != exitOK {
		t.Fatalf("--help: exit %d", code)
	}
	if !strings.Contains(stdout.String(), "Examples:") || !strings.Contains(stdout.String(), "--url https://") {
		t.Errorf("--help has no examples:\n%s", stdout.String())
	}
}

// --database takes a PostgreSQL URL only: anything else stops the start
// (exit 1) naming the flag, the value without its password and what to
// give, before any store is opened.
func TestDatabase_NotAPostgreSQLURLIsRefusedNamingTheFlag(t *testing.T) {
	dir := t.TempDir()
	var stdout, stderr strings.Builder
	code := execute(context.Background(), []string{"--data", dir, "--listen", "127.0.0.1:0", "--log-level", "error",
		"--database", "mysql://knotless:hunter2@db:3306/knotless"}, &stdout, &stderr)
	want := `knotless-server: --database "mysql://knotless:xxxxx@db:3306/knotless": want a PostgreSQL URL (postgres://USER:PASSWORD@HOST:PORT/DB), or nothing for SQLite in DATA/knotless.db` + "\n"
	if code != exitError || stderr.String() != want {
		t.Errorf("exit %d, stderr %q; want %d, %q", code, stderr.String(), exitError, want)
	}
	if _, err := os.Stat(filepath.Join(dir, "knotless.db")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("knotless.db: %v; want no SQLite database made", err)
	}
}
