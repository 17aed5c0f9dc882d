package e2e

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"knotless.dev/knotless/internal/deploy"
	"knotless.dev/knotless/test/kubetest"
)

// Every command of docs/kubernetes.md marked for testing runs, in order and
// as written, in one shell against the local cluster: register, deploy,
// check with doctor, change the job machine, remove. The variables the
// guide asks the reader to set are set to the test's values (the same
// names, checked). The release is made as `make release` makes it
// (deploy.MakeRelease, outside the work tree: the guide's `make release`
// would rebuild every program into the checkout's dist/) and served, as
// the guide says, by the server's --release-dir.
func TestDocs_KubernetesGuideRunsAsWritten(t *testing.T) {
	c := kubetest.Connect(t)
	w, rel, url := releaseWorld(t, c)
	manifest, err := os.ReadFile(filepath.Join(moduleRoot, deploy.Manifest))
	if err != nil {
		t.Fatal(err)
	}
	if s := deploy.Stale(manifest, rel.Digests); s != "" {
		t.Fatalf("the guide deploys the manifest as it is, and its digests are stale: run `make deploy-digests`\n%s", s)
	}
	ns := "kt-guide-" + randomHex(4)
	vars := map[string]string{
		"KNOTLESS_SERVER":       w.url,
		"REPO":                  w.repo,
		"KNOTLESS_SOURCE":       moduleRoot,
		"KNOTLESS_DOWNLOAD_URL": url,
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
	for _, want := range []string{
		"knotless-install: this pod's architecture: linux/" + runtime.GOARCH,
		"knotless-install: " + deploy.FileName("knotless-run", runtime.GOARCH) + " ok",
		"knotless-install: knotless-agent-linux-amd64 ok", "knotless-install: knotless-agent-linux-arm64 ok",
		"ok    step with a secret over the stream", "ok    test job pod removed",
		"Removed runner k8s-ci",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the guide's commands did not print %q:\n%s", want, out)
		}
	}
}
