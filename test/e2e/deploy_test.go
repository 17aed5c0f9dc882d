package e2e

import (
	"context"
	"fmt"
	"maps"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/deploy"
	"knotless.dev/knotless/internal/executor/agentenv"
	"knotless.dev/knotless/internal/server"
	"knotless.dev/knotless/internal/testwait"
	"knotless.dev/knotless/test/kubetest"
)

// RunnerBaseImage stands in, on the local cluster, for the stock image the
// manifests name (busybox and git, nothing of Knotless): the test imports
// it from this machine's files. A changed image needs a new tag.
const RunnerBaseImage = "localhost/knotless/runner-base:3"

// deployed is the release the deploy tests install: knotless-run and
// knotless-agent for linux/amd64 and linux/arm64, SHA256SUMS and the
// one-file manifest, made as `make release` makes them
// (deploy.MakeRelease), once per test binary, outside the work tree (Go's
// build cache makes it cheap after the first time).
var deployed struct {
	once sync.Once
	rel  *deploy.Release
	err  error
}

func deployRelease(t testing.TB) *deploy.Release {
	t.Helper()
	deployed.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
		defer cancel()
		deployed.rel, deployed.err = deploy.MakeRelease(ctx, moduleRoot, filepath.Join(binDir, "release"), deploy.Programs)
	})
	if deployed.err != nil {
		t.Fatal(deployed.err)
	}
	return deployed.rel
}

// deployBuild is the release's files, by file name
// (knotless-run-linux-amd64, ...).
func deployBuild(t testing.TB) map[string]string {
	t.Helper()
	return deployRelease(t).Files
}

// releaseWorld is a world whose knotless-server serves the deployed
// release (--release-dir) where the cluster's pods reach it, with the
// runner base image imported; it returns the release's download URL there
// (KNOTLESS_DOWNLOAD_URL): no other web server.
func releaseWorld(t testing.TB, c *kubetest.Cluster) (*world, *deploy.Release, string) {
	t.Helper()
	rel := deployRelease(t)
	ensureRunnerBaseImage(t, c)
	w := newWorldAt(t, c.HostIP(t)+":0", 30*time.Second, "--release-dir", rel.Dir)
	return w, rel, w.url + strings.TrimSuffix(server.DownloadPath, "/")
}

// ensureRunnerBaseImage imports RunnerBaseImage unless the cluster has it.
func ensureRunnerBaseImage(t testing.TB, c *kubetest.Cluster) {
	t.Helper()
	if c.HasImage(t, RunnerBaseImage) {
		return
	}
	files, err := deploy.BaseFiles()
	if err != nil {
		t.Fatal(err)
	}
	uid := fmt.Sprint(deploy.RunnerUID)
	archive := filepath.Join(t.TempDir(), "runner-base.tar")
	if err := deploy.WriteArchive(archive, deploy.Image{Ref: RunnerBaseImage, Files: files, User: uid + ":" + uid,
		Entrypoint: []string{"/bin/sh"}, Env: []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/tmp"}}); err != nil {
		t.Fatal(err)
	}
	c.ImportImage(t, archive)
}

// serveFiles serves files (name → host path) over HTTP on host, port 0,
// until the test ends, and returns the base URL: a stand-in for wherever
// an operator keeps the release files.
func serveFiles(t testing.TB, host string, files map[string]string) string {
	t.Helper()
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	for name, path := range files {
		mux.HandleFunc("GET /download/"+name, func(w http.ResponseWriter, r *http.Request) { http.ServeFile(w, r, path) })
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return "http://" + ln.Addr().String() + "/download"
}

// deployment is deploy/kubernetes applied with `kubectl apply -k` through
// an overlay of the test's (its own namespace, the local images, the
// test's download URL and small job pods), as docs/kubernetes.md tells an
// operator to make one.
type deployment struct {
	c   *kubetest.Cluster
	dir string // the overlay
	ns  string
}

// applyRunner creates the namespace and the credential Secret from
// statePath, applies the overlay of variant ("emptydir" or "pvc") and, if
// wait, waits for the rollout. The test's end deletes it all.
func applyRunner(t testing.TB, c *kubetest.Cluster, variant, downloadURL, statePath string, wait bool) *deployment {
	t.Helper()
	return applyRunnerImage(t, c, variant, RunnerBaseImage, downloadURL, statePath, wait)
}

// applyRunnerImage is applyRunner with the runner pod's image.
func applyRunnerImage(t testing.TB, c *kubetest.Cluster, variant, image, downloadURL, statePath string, wait bool) *deployment {
	t.Helper()
	i := strings.LastIndex(image, ":")
	imageName, imageTag := image[:i], image[i+1:]
	d := &deployment{c: c, dir: t.TempDir(), ns: "kt-deploy-" + randomHex(4)}
	rel := deployRelease(t)
	var digestEnv strings.Builder
	for name, env := range deploy.ManifestFiles() {
		fmt.Fprintf(&digestEnv, "                  - {name: %s, value: \"%s\"}\n", env, rel.Digests[name])
	}
	// kustomize takes only relative paths to other kustomizations.
	base, err := filepath.Rel(d.dir, filepath.Join(moduleRoot, "deploy", "kubernetes", "overlays", variant))
	if err != nil {
		t.Fatal(err)
	}
	kust := fmt.Sprintf(`apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
  - %s
namespace: %s
images:
  - name: docker.io/alpine/git
    newName: %s
    newTag: "%s"
configMapGenerator:
  - name: knotless-runner-settings
    behavior: merge
    literals:
      - KNOTLESS_DOWNLOAD_URL=%s
      - KNOTLESS_IMAGE=%s
      - KNOTLESS_CPUS=200m
      - KNOTLESS_MEMORY=128Mi
      - KNOTLESS_DISK=256Mi
      - KNOTLESS_LOG_LEVEL=debug
# The digests of this very build: the manifest's own may lag behind the
# code until `+"`make deploy-digests`"+` (TestDeploy_ManifestDigestsMatchTheBuild
# says so), and this test is about the deployment, not about that.
patches:
  - patch: |-
      apiVersion: apps/v1
      kind: Deployment
      metadata: {name: knotless-runner}
      spec:
        template:
          spec:
            initContainers:
              - name: install
                env:
%s`, base, d.ns,
		imageName, imageTag, downloadURL, kubetest.JobBaseImage, digestEnv.String())
	if err := os.WriteFile(filepath.Join(d.dir, "kustomization.yaml"), []byte(kust), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		if out, err := d.kubectl(ctx, "delete", "-k", ".", "--ignore-not-found", "--timeout=150s"); err != nil {
			t.Errorf("remove the deployment: %v\n%s", err, out)
			_, _ = d.kubectl(ctx, "delete", "namespace", d.ns, "--ignore-not-found", "--wait=false")
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	d.must(t, ctx, "create", "namespace", d.ns)
	d.must(t, ctx, "-n", d.ns, "create", "secret", "generic", "knotless-runner", "--from-file=runner.json="+statePath)
	start := time.Now()
	d.must(t, ctx, "apply", "--server-side", "-k", ".")
	if wait {
		if out, err := d.kubectl(ctx, "-n", d.ns, "rollout", "status", "deploy/knotless-runner", "--timeout=4m"); err != nil {
			desc, _ := d.kubectl(ctx, "-n", d.ns, "describe", "pods")
			logs, _ := d.kubectl(ctx, "-n", d.ns, "logs", "deploy/knotless-runner", "--all-containers")
			t.Fatalf("%v\n%s\n%s\n%s", err, out, desc, logs)
		}
		d.logStartup(t, time.Since(start))
	}
	return d
}

// logStartup logs how long the runner pod took from apply to its rollout,
// and its init container (fetch and check both programs, copy the
// credential), from the pod's status.
func (d *deployment) logStartup(t testing.TB, rollout time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	list, err := d.c.Client.CoreV1().Pods(d.ns).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=knotless-runner"})
	if err != nil || len(list.Items) == 0 {
		return
	}
	for _, s := range list.Items[0].Status.InitContainerStatuses {
		if term := s.State.Terminated; s.Name == "install" && term != nil {
			t.Logf("runner pod: apply → rollout done in %s; init container ran %s", rollout.Round(time.Millisecond), term.FinishedAt.Sub(term.StartedAt.Time))
		}
	}
}

func (d *deployment) kubectl(ctx context.Context, args ...string) (string, error) {
	return d.c.Kubectl(ctx, d.dir, args...)
}

func (d *deployment) must(t testing.TB, ctx context.Context, args ...string) string {
	t.Helper()
	out, err := d.kubectl(ctx, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// jobPods lists the job pods in the deployment's namespace.
func (d *deployment) jobPods(t testing.TB) []corev1.Pod {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	list, err := d.c.Client.CoreV1().Pods(d.ns).List(ctx, metav1.ListOptions{LabelSelector: agentenv.LabelManagedBy + "=" + agentenv.ManagedBy})
	if err != nil {
		t.Fatal(err)
	}
	return list.Items
}

// runnerLogs is the runner pod's log (for failure messages).
func (d *deployment) runnerLogs() string {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, _ := d.kubectl(ctx, "-n", d.ns, "logs", "deploy/knotless-runner", "--all-containers", "--tail=200")
	return out
}

// The runner deployed from deploy/kubernetes (a pod of the local cluster,
// its programs fetched from knotless-server --release-dir and checked by
// the init container) claims a pushed run, runs it in a job pod and
// reports success; `kubectl delete -k` then removes the job pod of a run
// still going.
func TestDeploy_RunnerPodRunsAPushAndDeleteKRemovesItsJobPods(t *testing.T) {
	c := kubetest.Connect(t)
	w, _, url := releaseWorld(t, c)
	rid := w.registerRunner("k8s-ci")
	d := applyRunner(t, c, "emptydir", url, rid.state, true)

	run := w.pushOne(map[string]string{
		"hello.txt": "hello from the checkout\n",
		".knotless/workflows/ci.yml": `on:
  push: {}
runners: [k8s-ci]
steps:
  - name: hello
    run: |
      cat hello.txt
      echo "pod $(hostname)"
`,
	})
	got := w.waitFinal(run.ID, 4*time.Minute)
	if got.State != api.StateSucceeded {
		t.Fatalf("run %s, want succeeded\n%s\nrunner pod:\n%s", describe(got), w.stepLog(run.ID, 0)+w.stepLog(run.ID, 1), d.runnerLogs())
	}
	if log := w.stepLog(run.ID, 1); !strings.Contains(log, "hello from the checkout") || !strings.Contains(log, "pod knotless-run-") {
		t.Fatalf("step log lacks the checkout's file or the job pod's name:\n%s", log)
	}

	// A run that goes on: its job pod exists until the deployment is removed.
	run = w.pushOne(map[string]string{".knotless/workflows/ci.yml": `on:
  push: {}
runners: [k8s-ci]
steps:
  - name: long
    run: echo started; sleep 600
`})
	var jobPod corev1.Pod
	testwait.Until(t, 3*time.Minute, "the long run's job pod", func() (bool, string) {
		pods := d.jobPods(t)
		if len(pods) > 0 {
			jobPod = pods[0]
		}
		return len(pods) > 0, fmt.Sprintf("%d job pods; run %s", len(pods), describe(w.run(run.ID)))
	})
	// The runner's Deployment owns the job pod (KNOTLESS_OWNER), not the
	// runner's pod: a restart of that pod loses no run
	// (docs/kubernetes-restarts.md), and delete -k removes the job pod.
	if owners := jobPod.OwnerReferences; len(owners) != 1 || owners[0].Kind != "Deployment" || owners[0].Name != "knotless-runner" {
		t.Errorf("job pod %s owners %+v: want the Deployment knotless-runner", jobPod.Name, owners)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if out, err := d.kubectl(ctx, "delete", "-k", ".", "--timeout=150s"); err != nil {
		t.Fatalf("kubectl delete -k: %v\n%s", err, out)
	}
	testwait.Until(t, 2*time.Minute, "no job pod left", func() (bool, string) {
		pods := d.jobPods(t)
		return len(pods) == 0, fmt.Sprintf("%d job pods", len(pods))
	})
}

// A knotless-run whose bytes differ from the manifest's digest (altered on
// the way, or another version) is refused: the init container fails,
// naming the file, and the runner never starts.
func TestDeploy_TamperedRunnerFileFailsTheInitContainerNamingIt(t *testing.T) {
	c := kubetest.Connect(t)
	host := c.HostIP(t)
	files := maps.Clone(deployBuild(t))
	ensureRunnerBaseImage(t, c)
	// The node's own architecture: this machine's (the local cluster).
	run := deploy.FileName("knotless-run", runtime.GOARCH)
	data, err := os.ReadFile(files[run])
	if err != nil {
		t.Fatal(err)
	}
	tampered := filepath.Join(t.TempDir(), run)
	if err := os.WriteFile(tampered, append(data, "tampered"...), 0o755); err != nil {
		t.Fatal(err)
	}
	files[run] = tampered
	url := serveFiles(t, host, files)
	state := filepath.Join(t.TempDir(), "runner.json")
	if err := os.WriteFile(state, []byte("{}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	d := applyRunner(t, c, "emptydir", url, state, false)
	var msg string
	testwait.Until(t, 3*time.Minute, "the init container to fail", func() (bool, string) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		list, err := c.Client.CoreV1().Pods(d.ns).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=knotless-runner"})
		if err != nil {
			return false, err.Error()
		}
		for _, p := range list.Items {
			for _, s := range p.Status.InitContainerStatuses {
				term := s.State.Terminated
				if term == nil {
					term = s.LastTerminationState.Terminated
				}
				if s.Name == "install" && term != nil && term.ExitCode != 0 {
					msg = term.Message
					return true, ""
				}
			}
			if len(p.Status.ContainerStatuses) > 0 && p.Status.ContainerStatuses[0].State.Running != nil {
				t.Fatalf("the runner started from a tampered knotless-run")
			}
		}
		return false, fmt.Sprintf("%d pods", len(list.Items))
	})
	if !strings.Contains(msg, run+": SHA-256 mismatch") || !strings.Contains(msg, deploy.DigestEnv("knotless-run", runtime.GOARCH)) {
		t.Fatalf("init container's message does not name %s's mismatch and its variable:\n%s", run, msg)
	}
}

// The runner image (make runner-image) runs the runner with no download:
// with KNOTLESS_DOWNLOAD_URL empty the init container takes knotless-run
// for its architecture and both agents from the image, under their release
// names, checks their digests, and the runner runs a pushed workflow.
func TestDeploy_RunnerImageRunsTheRunnerWithoutADownload(t *testing.T) {
	c := kubetest.Connect(t)
	rel := deployRelease(t)
	run := deploy.FileName("knotless-run", runtime.GOARCH)
	// Named after its content, so a rebuilt program is a new image.
	ref := "localhost/knotless/runner:test-" + rel.Digests[run][:12] +
		rel.Digests[deploy.FileName("knotless-agent", "amd64")][:6] + rel.Digests[deploy.FileName("knotless-agent", "arm64")][:6]
	if !c.HasImage(t, ref) {
		img, err := deploy.RunnerImage(ref, runtime.GOARCH, rel.Files)
		if err != nil {
			t.Fatal(err)
		}
		archive := filepath.Join(t.TempDir(), "runner.tar")
		if err := deploy.WriteArchive(archive, img); err != nil {
			t.Fatal(err)
		}
		c.ImportImage(t, archive)
	}
	t.Cleanup(func() { c.RemoveImage(t, ref) }) // runs after the deployment's removal
	w := newWorldAt(t, c.HostIP(t)+":0", 30*time.Second)
	rid := w.registerRunner("k8s-img")
	d := applyRunnerImage(t, c, "emptydir", ref, "", rid.state, true)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, _ := d.kubectl(ctx, "-n", d.ns, "logs", "deploy/knotless-runner", "-c", "install")
	for _, name := range []string{run, deploy.FileName("knotless-agent", "amd64"), deploy.FileName("knotless-agent", "arm64")} {
		if !strings.Contains(out, "taking "+name+" from the image") || !strings.Contains(out, name+" ok") {
			t.Fatalf("the init container did not take %s from the image:\n%s", name, out)
		}
	}
	r := w.pushOne(map[string]string{".knotless/workflows/ci.yml": `on:
  push: {}
runners: [k8s-img]
steps:
  - run: echo from the runner image
`})
	if got := w.waitFinal(r.ID, 4*time.Minute); got.State != api.StateSucceeded {
		t.Fatalf("run %s, want succeeded\n%s", describe(got), d.runnerLogs())
	}
}
