package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"knotless.dev/knotless/internal/deploy"
	"knotless.dev/knotless/test/kubetest"
)

// Every command of docs/kubernetes.md marked for testing runs, in order and
// as written, in one shell against the local cluster: register, deploy,
// check with doctor, change the job machine, remove. The variables the guide asks the reader
// to set are set to the test's values (the same names, checked).
func TestDocs_KubernetesGuideRunsAsWritten(t *testing.T) {
	c := kubetest.Connect(t)
	progs := deployBuild(t)
	digests := map[string]string{}
	for p, path := range progs {
		var err error
		if digests[p], err = deploy.FileDigest(path); err != nil {
			t.Fatal(err)
		}
	}
	manifest, err := os.ReadFile(filepath.Join(moduleRoot, deploy.Manifest))
	if err != nil {
		t.Fatal(err)
	}
	if s := deploy.Stale(manifest, digests); s != "" {
		t.Fatalf("the guide deploys the manifest as it is, and its digests are stale: run `make deploy-digests`\n%s", s)
	}
	ensureRunnerBaseImage(t, c)
	host := c.HostIP(t)
	w := newWorldAt(t, host+":0", 30*time.Second)
	ns := "kt-guide-" + randomHex(4)
	vars := map[string]string{
		"KNOTLESS_SERVER":       w.url,
		"REPO":                  w.repo,
		"KNOTLESS_SOURCE":       moduleRoot,
		"KNOTLESS_DOWNLOAD_URL": serveFiles(t, host, progs),
		"BASE_IMAGE":            RunnerBaseImage,
		"JOB_IMAGE":             kubetest.JobBaseImage,
		"NAMESPACE":             ns,
	}
	logs := t.TempDir()
	script := guideScript(t, logs, vars, "docs/kubernetes.md")

	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		_, _ = c.Kubectl(ctx, "", "delete", "namespace", ns, "--ignore-not-found", "--timeout=150s")
	})
	env := append(baseEnv(w.home),
		"PATH="+binDir+string(os.PathListSeparator)+filepath.Dir(c.KubectlPath())+string(os.PathListSeparator)+os.Getenv("PATH"),
		"KUBECONFIG="+filepath.Join(c.StateDir, "admin.kubeconfig"),
		"XDG_CONFIG_HOME="+filepath.Join(w.home, ".config"), "KNOTLESS_TOKEN="+w.token)
	out := runGuide(t, t.TempDir(), logs, script, env, vars, 15*time.Minute)
	for _, want := range []string{"knotless-install: knotless-run ok", "knotless-install: knotless-agent ok",
		"ok    step with a secret over the stream", "ok    test job pod removed", "Removed runner k8s-ci"} {
		if !strings.Contains(out, want) {
			t.Errorf("the guide's commands did not print %q:\n%s", want, out)
		}
	}
}
