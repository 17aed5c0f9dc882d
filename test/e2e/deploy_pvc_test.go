package e2e

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/deploy"
	"knotless.dev/knotless/internal/testwait"
	"knotless.dev/knotless/test/kubetest"
)

// With the pvc overlay the runner's git mirrors outlive its pod: after a
// rollout restart the new runner pod finds the commit in its mirror
// instead of fetching it again. (The local cluster has no volume
// provisioner: the test binds the claim to a hostPath volume it makes.)
func TestDeploy_PVCVariantKeepsTheMirrorAcrossRunnerPods(t *testing.T) {
	c := kubetest.Connect(t)
	host := c.HostIP(t)
	url := serveFiles(t, host, deployBuild(t))
	ensureRunnerBaseImage(t, c)
	w := newWorldAt(t, host+":0", 30*time.Second)
	rid := w.registerRunner("k8s-pvc")
	d := applyRunner(t, c, "pvc", url, rid.state, false)

	dir := t.TempDir()
	if err := os.Chown(dir, deploy.RunnerUID, deploy.RunnerUID); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	pv, err := c.Client.CoreV1().PersistentVolumes().Create(ctx, &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: d.ns + "-work", Labels: map[string]string{kubetest.TestLabel: "deploy"}},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("20Gi")},
			AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
			ClaimRef:                      &corev1.ObjectReference{Namespace: d.ns, Name: "knotless-runner-work"},
			PersistentVolumeSource:        corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: dir}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// Deleted once its claim is (the namespace's removal, a cleanup that
	// runs after this one); a bound volume waits for that.
	t.Cleanup(func() {
		_ = c.Client.CoreV1().PersistentVolumes().Delete(context.Background(), pv.Name, metav1.DeleteOptions{})
	})
	rollout := func() {
		t.Helper()
		if out, err := d.kubectl(ctx, "-n", d.ns, "rollout", "status", "deploy/knotless-runner", "--timeout=4m"); err != nil {
			desc, _ := d.kubectl(ctx, "-n", d.ns, "describe", "pods,pvc")
			t.Fatalf("%v\n%s\n%s", err, out, desc)
		}
	}
	rollout()

	wf := `on:
  push: {}
  manual: {}
runners: [k8s-pvc]
steps:
  - run: echo ok
`
	run := w.pushOne(map[string]string{".knotless/workflows/ci.yml": wf})
	if got := w.waitFinal(run.ID, 4*time.Minute); got.State != api.StateSucceeded {
		t.Fatalf("first run %s\n%s", describe(got), d.runnerLogs())
	}
	if log := w.stepLog(run.ID, 0); !strings.Contains(log, "fetching ") {
		t.Fatalf("the first run did not fetch the commit:\n%s", log)
	}

	before := d.runnerPodUID(t)
	if out, err := d.kubectl(ctx, "-n", d.ns, "rollout", "restart", "deploy/knotless-runner"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	testwait.Until(t, 3*time.Minute, "a new runner pod", func() (bool, string) {
		uid := d.runnerPodUID(t)
		return uid != "" && uid != before, "uid " + uid
	})
	rollout()

	w.cliOK("", "run", "trigger", "--repo", w.repo, "--ref", "main")
	runs := w.runs(w.latestPipeline())
	if len(runs) != 1 {
		t.Fatalf("trigger made %d runs", len(runs))
	}
	if got := w.waitFinal(runs[0].ID, 4*time.Minute); got.State != api.StateSucceeded {
		t.Fatalf("second run %s\n%s", describe(got), d.runnerLogs())
	}
	if log := w.stepLog(runs[0].ID, 0); !strings.Contains(log, "is in the mirror already") {
		t.Fatalf("the new runner pod fetched the commit again: its mirror was lost:\n%s", log)
	}
}

// runnerPodUID is the UID of the running, ready runner pod ("" if none).
func (d *deployment) runnerPodUID(t testing.TB) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	list, err := d.c.Client.CoreV1().Pods(d.ns).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=knotless-runner"})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range list.Items {
		if p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning {
			return string(p.UID)
		}
	}
	return ""
}
