package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"knotless.dev/knotless/internal/store/postgres/pgtest"
)

// Every command of docs/scaling.md marked for testing runs as written, in
// bash, against a real PostgreSQL: two replicas on one database and one
// shared directory serve the same repository, and an existing SQLite data
// directory migrates into a new database. The variables the guide asks the
// reader to export are set to the test's values (the same names, checked).
func TestDocs_ScalingGuideRunsAsWritten(t *testing.T) {
	pg := pgtest.Start(t)
	blocks := docBlocks(t, "docs/scaling.md")
	root := t.TempDir()
	port := func() string {
		p, err := pgtest.FreePort()
		if err != nil {
			t.Fatal(err)
		}
		return fmt.Sprintf("127.0.0.1:%d", p)
	}
	vars := map[string]string{
		"KNOTLESS_DATABASE": pg.Database(t),
		"KNOTLESS_DATA":     filepath.Join(root, "shared"),
		"KNOTLESS_URL":      "http://ci.example.com",
		"A":                 port(),
		"B":                 port(),
	}
	var asked, set []string
	var tested []docBlock
	for _, b := range blocks {
		switch b.marker {
		case "test":
			tested = append(tested, b)
		case "test: values":
			for _, m := range exportName.FindAllStringSubmatch(b.text, -1) {
				asked = append(asked, m[1])
			}
		}
	}
	for k := range vars {
		set = append(set, k)
	}
	sort.Strings(asked)
	sort.Strings(set)
	if strings.Join(asked, " ") != strings.Join(set, " ") {
		t.Fatalf("docs/scaling.md asks the reader to set %v; this test sets %v", asked, set)
	}
	if len(tested) != 3 {
		t.Fatalf("%d tested blocks in docs/scaling.md, want 3 (start replicas, use both, migrate)", len(tested))
	}
	// An old single server's data directory, made by a SQLite server.
	oldData := filepath.Join(root, "old")
	old := exec.Command(serverBin(), "--data", oldData, "--listen", "127.0.0.1:0")
	if err := old.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := os.Stat(filepath.Join(oldData, "server.url")); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the SQLite server did not start")
		}
		time.Sleep(20 * time.Millisecond) // polling for the server's URL file
	}
	_ = old.Process.Signal(syscall.SIGTERM)
	_ = old.Wait()

	run := func(script string, env map[string]string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, "bash", "-c", "set -euxo pipefail\n"+script)
		cmd.Dir = root
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		cmd.Env = append(os.Environ(), "PATH="+binDir+string(os.PathListSeparator)+os.Getenv("PATH"), "HOME="+root)
		for k, v := range env {
			cmd.Env = append(cmd.Env, k+"="+v)
		}
		out, err := cmd.CombinedOutput()
		// The replicas the guide starts in the background go with the
		// script's process group when the test ends.
		pgid := cmd.Process.Pid
		t.Cleanup(func() { _ = syscall.Kill(-pgid, syscall.SIGTERM) })
		if err != nil {
			a, _ := os.ReadFile(filepath.Join(root, "replica-a.log"))
			b, _ := os.ReadFile(filepath.Join(root, "replica-b.log"))
			t.Fatalf("guide commands failed: %v\n%s\nreplica-a.log:\n%s\nreplica-b.log:\n%s", err, out, a, b)
		}
		return string(out)
	}
	var script strings.Builder
	for _, b := range tested[:2] {
		fmt.Fprintf(&script, ": '### docs/scaling.md:%d'\n%s", b.line, b.text)
	}
	out := run(script.String(), vars)
	if !strings.Contains(out, "admin/app") {
		t.Fatalf("the second replica does not list the repository made through the first:\n%s", out)
	}
	// migrate: into a database of its own, from the old directory.
	mig := map[string]string{"KNOTLESS_DATABASE": pg.Database(t), "OLD_DATA": oldData}
	out = run(fmt.Sprintf(": '### docs/scaling.md:%d'\n%s", tested[2].line, tested[2].text), mig)
	if !strings.Contains(out, "copied") || !strings.Contains(out, "accounts") {
		t.Fatalf("migrate printed no summary:\n%s", out)
	}
}
