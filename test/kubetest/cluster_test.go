package kubetest_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"knotless.dev/knotless/test/kubetest"
)

func TestConnectFailsQuicklyWithoutAnAPIServer(t *testing.T) {
	dir := t.TempDir()
	// A kubeconfig pointing at a port nothing listens on.
	kc := `apiVersion: v1
kind: Config
clusters:
- name: c
  cluster:
    server: https://127.0.0.1:1
users:
- name: u
  user:
    token: x
contexts:
- name: c
  context: {cluster: c, user: u}
current-context: c
`
	if err := os.WriteFile(filepath.Join(dir, "admin.kubeconfig"), []byte(kc), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv(kubetest.EnvStateDir, dir)
	start := time.Now()
	_, err := kubetest.Load(t.Context())
	if err == nil {
		t.Fatal("Load succeeded without an API server")
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("Load took %s to give up", d)
	}
	t.Log(err)
}
