package e2e

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/deploy"
	"knotless.dev/knotless/test/kubetest"
)

// editManifest makes the edits an operator makes in the release's one
// file before applying it (the download URL, the job machine), and those
// the test needs (its own namespace, the local runner image). Each edit
// must find its text, so a change of the rendered file fails here, not
// later.
func editManifest(t testing.TB, text, ns, downloadURL string) string {
	t.Helper()
	docs := strings.Split(text, "\n---\n")
	for i, d := range docs {
		if strings.Contains(d, "\nkind: Namespace\n") {
			docs[i] = strings.TrimSuffix(mustReplace(t, d+"\n", "\n  name: knotless-runner\n", "\n  name: "+ns+"\n"), "\n")
		}
	}
	text = strings.Join(docs, "\n---\n")
	for _, e := range [][2]string{
		{"namespace: knotless-runner\n", "namespace: " + ns + "\n"},
		{"image: docker.io/alpine/git:v2.45.1\n", "image: " + RunnerBaseImage + "\n"},
		{"KNOTLESS_DOWNLOAD_URL: https://ci.example.com/-/download\n", "KNOTLESS_DOWNLOAD_URL: " + downloadURL + "\n"},
		{"KNOTLESS_IMAGE: docker.io/library/alpine:3.22\n", "KNOTLESS_IMAGE: " + kubetest.JobBaseImage + "\n"},
		{"KNOTLESS_CPUS: \"1\"\n", "KNOTLESS_CPUS: 200m\n"},
		{"KNOTLESS_MEMORY: 2Gi\n", "KNOTLESS_MEMORY: 128Mi\n"},
		{"KNOTLESS_DISK: 10Gi\n", "KNOTLESS_DISK: 256Mi\n"},
	} {
		text = mustReplace(t, text, e[0], e[1])
	}
	return text
}

func mustReplace(t testing.TB, s, old, new string) string {
	t.Helper()
	if !strings.Contains(s, old) {
		t.Fatalf("the release's manifest has no %q to edit:\n%s", old, s)
	}
	return strings.ReplaceAll(s, old, new)
}

// The release's one file (make release), edited as the guide says and
// applied with `kubectl apply -f`, deploys a runner that fetches its files
// from knotless-server --release-dir, reports the release's version (not
// "dev") and runs a pushed workflow; `kubectl delete -f` removes it all.
func TestRelease_RenderedManifestAppliesAsOneFile(t *testing.T) {
	c := kubetest.Connect(t)
	w, rel, url := releaseWorld(t, c)
	rid := w.registerRunner("k8s-onefile")
	text, err := os.ReadFile(rel.Manifest)
	if err != nil {
		t.Fatal(err)
	}
	ns := "kt-onefile-" + randomHex(4)
	dir := t.TempDir()
	file := filepath.Join(dir, filepath.Base(rel.Manifest))
	if err := os.WriteFile(file, []byte(editManifest(t, string(text), ns, url)), 0o644); err != nil {
		t.Fatal(err)
	}
	kubectl := func(ctx context.Context, args ...string) string {
		t.Helper()
		out, err := c.Kubectl(ctx, dir, args...)
		if err != nil {
			desc, _ := c.Kubectl(ctx, dir, "-n", ns, "describe", "pods")
			logs, _ := c.Kubectl(ctx, dir, "-n", ns, "logs", "deploy/knotless-runner", "--all-containers", "--tail=100")
			t.Fatalf("%v\n%s\n%s", err, desc, logs)
		}
		return out
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		if out, err := c.Kubectl(ctx, dir, "delete", "-f", file, "--ignore-not-found", "--timeout=150s"); err != nil {
			t.Errorf("kubectl delete -f: %v\n%s", err, out)
			_, _ = c.Kubectl(ctx, dir, "delete", "namespace", ns, "--ignore-not-found", "--wait=false")
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	// As the guide: the namespace and the credential's Secret, then the file.
	kubectl(ctx, "create", "namespace", ns)
	kubectl(ctx, "-n", ns, "create", "secret", "generic", "knotless-runner", "--from-file=runner.json="+rid.state)
	kubectl(ctx, "apply", "-f", file)
	kubectl(ctx, "-n", ns, "rollout", "status", "deploy/knotless-runner", "--timeout=4m")

	install := kubectl(ctx, "-n", ns, "logs", "deploy/knotless-runner", "-c", "install")
	for _, want := range []string{
		"this pod's architecture: linux/" + runtime.GOARCH,
		"fetching " + deploy.FileName("knotless-run", runtime.GOARCH) + " from " + url + "/",
		deploy.FileName("knotless-run", runtime.GOARCH) + " ok (sha256 " + rel.Digests[deploy.FileName("knotless-run", runtime.GOARCH)] + ")",
		"knotless-agent-linux-amd64 ok (sha256 " + rel.Digests["knotless-agent-linux-amd64"] + ")",
		"knotless-agent-linux-arm64 ok (sha256 " + rel.Digests["knotless-agent-linux-arm64"] + ")",
	} {
		if !strings.Contains(install, want) {
			t.Errorf("the init container's log lacks %q:\n%s", want, install)
		}
	}
	if v := kubectl(ctx, "-n", ns, "exec", "deploy/knotless-runner", "-c", "runner", "--", "/opt/knotless/bin/knotless-run", "--version"); !strings.Contains(v, rel.Version) {
		t.Errorf("the deployed knotless-run says %q, want version %s", v, rel.Version)
	}

	run := w.pushOne(map[string]string{".knotless/workflows/ci.yml": `on:
  push: {}
runners: [k8s-onefile]
steps:
  - run: echo deployed from one file
`})
	if got := w.waitFinal(run.ID, 4*time.Minute); got.State != api.StateSucceeded {
		logs, _ := c.Kubectl(ctx, dir, "-n", ns, "logs", "deploy/knotless-runner", "--all-containers", "--tail=200")
		t.Fatalf("run %s, want succeeded\n%s", describe(got), logs)
	}
	if log := w.stepLog(run.ID, 1); !strings.Contains(log, "deployed from one file") {
		t.Fatalf("step log:\n%s", log)
	}
}
