package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"knotless.dev/knotless/internal/objstore/s3test"
)

// docs/storage.md's "Try it on one machine", as a reader types it: the
// trial S3 store (versitygw, the version s3test builds, on PATH as the
// page's `go install` would put it), a server that moves ended runs' logs
// into the bucket and keeps the newest pipeline of a branch, two runners
// on their own work directories sharing a cache through the store: the
// second runner restores what the first saved, a moved log is served from
// the bucket, and the older run's logs say when they expired.
func TestDocs_StorageGuideRunsAsWritten(t *testing.T) {
	t.Parallel()
	var root string
	t.Cleanup(func() { noProcessLeftIn(t, root, 30*time.Second) })
	root = t.TempDir()
	logs := t.TempDir()
	bin, err := s3test.Install()
	if err != nil {
		t.Fatal(err)
	}
	tools := filepath.Join(root, "tools")
	if err := os.MkdirAll(tools, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(bin, filepath.Join(tools, "versitygw")); err != nil {
		t.Fatal(err)
	}
	addr, s3addr := freeAddr(t), freeAddr(t)
	vars := map[string]string{
		"KNOTLESS_SERVER":       "http://" + addr,
		"LISTEN":                addr,
		"DATA":                  filepath.Join(root, "data"),
		"STORE_DIR":             filepath.Join(root, "s3"),
		"STORE_LISTEN":          s3addr,
		"AWS_ACCESS_KEY_ID":     "knotless-docs",
		"AWS_SECRET_ACCESS_KEY": "docs-secret-" + filepath.Base(root),
		"KNOTLESS_OBJECT_STORE": "http://" + s3addr + "/knotless/server",
		"KNOTLESS_CACHE_STORE":  "http://" + s3addr + "/knotless/caches",
	}
	env := guideEnv(t)
	for i, kv := range env {
		if strings.HasPrefix(kv, "PATH=") {
			env[i] = "PATH=" + tools + string(os.PathListSeparator) + strings.TrimPrefix(kv, "PATH=")
		}
	}
	dir := t.TempDir()
	script := guideScript(t, logs, vars, "docs/storage.md")
	out := runGuide(t, dir, logs, script, env, vars, 5*time.Minute)
	t.Logf("the guide's output:\n%s", out)
	for _, want := range []string{"deps restored, made by runner-a", "hit (downloaded", "expired on", "s3: "} {
		if !strings.Contains(out, want) {
			t.Errorf("the guide's commands did not print %q:\n%s", want, out)
		}
	}
}
