package main

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"knotless.dev/knotless/internal/api"
)

func TestEnvFallbacks_FlagWinsOverEnvironment(t *testing.T) {
	t.Setenv("KNOTLESS_LISTEN", "127.0.0.1:9999")
	t.Setenv("KNOTLESS_LEASE", "5s")
	cmd := newCommand()
	if err := cmd.ParseFlags([]string{"--lease", "7s"}); err != nil {
		t.Fatal(err)
	}
	if err := envFallbacks(cmd.Flags()); err != nil {
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
	if err := envFallbacks(cmd.Flags()); err == nil || !strings.Contains(err.Error(), "KNOTLESS_LEASE") {
		t.Errorf("bad KNOTLESS_LEASE: err = %v, want one naming the variable", err)
	}
}

func TestServer_StartsServesAndStopsCleanlyOnSIGTERM(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the program")
	}
	bin := filepath.Join(t.TempDir(), "knotless-server")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	data := filepath.Join(t.TempDir(), "data")
	cmd := exec.Command(bin, "--data", data, "--listen", "127.0.0.1:0")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
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
	base := ""
	deadline := time.After(30 * time.Second)
	for base == "" {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("server exited early:\n%s", strings.Join(log, "\n"))
			}
			log = append(log, l)
			if m := urlRE.FindStringSubmatch(l); m != nil {
				base = m[1]
			}
		case <-deadline:
			t.Fatalf("no ready line:\n%s", strings.Join(log, "\n"))
		}
	}
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
}
