package kube_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"knotless.dev/knotless/internal/agent/agenttest"
	"knotless.dev/knotless/internal/executor"
	"knotless.dev/knotless/internal/executor/kube"
	"knotless.dev/knotless/internal/syncbuf"
	"knotless.dev/knotless/test/kubetest"
)

// runnerDeployment is the name of the stand-in for the runner's
// Deployment in these tests.
const runnerDeployment = "knotless-runner"

// ownerRules is the runner's Role with the deployment/NAME owner design:
// the pod rules and get on exactly that Deployment.
func ownerRules() []rbacv1.PolicyRule {
	return append(kubetest.PodRunnerRules(), rbacv1.PolicyRule{
		APIGroups: []string{"apps"}, Resources: []string{"deployments"}, ResourceNames: []string{runnerDeployment}, Verbs: []string{"get"},
	})
}

// newOwnerFixture is newFixture with ownerRules and, made as the admin, a
// Deployment named runnerDeployment with no replicas (only its identity
// matters here: the runner runs as this test's process).
func newOwnerFixture(t *testing.T) *fixture {
	t.Helper()
	c := kubetest.Connect(t)
	ns := c.RestrictedNamespace(t)
	path, cfg := c.ServiceAccountKubeconfig(t, ns, "runner", ownerRules())
	f := &fixture{c: c, ns: ns, rest: cfg, kubeconfig: path, agent: agenttest.Binary(t)}
	f.createRunnerDeployment(t)
	return f
}

// createRunnerDeployment makes, as the admin, a Deployment named
// runnerDeployment with no replicas.
func (f *fixture) createRunnerDeployment(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pod := kubetest.RestrictedPod(f.ns, "")
	pod.Spec.RestartPolicy = corev1.RestartPolicyAlways
	sel := map[string]string{"app.kubernetes.io/name": "knotless-runner"}
	_, err := f.c.Client.AppsV1().Deployments(f.ns).Create(ctx, &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: runnerDeployment, Labels: sel},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](0),
			Selector: &metav1.LabelSelector{MatchLabels: sel},
			Strategy: appsv1.DeploymentStrategy{Type: appsv1.RecreateDeploymentStrategyType},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: sel}, Spec: pod.Spec},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create the runner's Deployment: %v", err)
	}
}

// ownerOf resolves KIND/NAME as the runner's ServiceAccount.
func (f *fixture) ownerOf(t *testing.T, spec string) *metav1.OwnerReference {
	t.Helper()
	kind, name, err := kube.ParseOwner(spec)
	if err != nil {
		t.Fatal(err)
	}
	client, err := kubernetes.NewForConfig(f.rest)
	if err != nil {
		t.Fatal(err)
	}
	o, err := kube.ResolveOwner(context.Background(), client, f.ns, kind, name)
	if err != nil {
		t.Fatal(err)
	}
	return o
}

// The failure the restart design fixes: a job pod owned by the runner's
// pod is deleted by the garbage collector once that pod is gone (a
// rollout restart, an upgrade, an eviction), before any successor could
// adopt it. A job pod owned by the runner's Deployment outlives the
// runner pod, keeps its step running, is adopted by a new executor
// (Recover, the successor), and goes with the Deployment when the runner
// is removed (`kubectl delete -k`).
func TestKube_JobPodOwnedByTheRunnerPodIsDeletedWithItButTheDeploymentsOutlivesItAndGoesWithTheDeployment(t *testing.T) {
	f := newOwnerFixture(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	// The runner's pod, as the old design's owner.
	runnerPod, err := f.c.Client.CoreV1().Pods(f.ns).Create(ctx, kubetest.RestrictedPod(f.ns, "runner-pod"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	byPod := f.config()
	byPod.Runner, byPod.Owner = "by-pod", f.ownerOf(t, "pod/"+runnerPod.Name)
	byDeploy := f.config()
	byDeploy.Runner, byDeploy.Owner = "by-deploy", f.ownerOf(t, "deployment/"+runnerDeployment)
	if byDeploy.Owner.Kind != "Deployment" || byDeploy.Owner.APIVersion != "apps/v1" || *byDeploy.Owner.Controller || *byDeploy.Owner.BlockOwnerDeletion {
		t.Fatalf("owner reference %+v, want a Deployment, not controller, not blocking", byDeploy.Owner)
	}

	podSess := f.prepare(t, f.executor(t, byPod), f.spec(t, runID("bypod")))
	first := f.executor(t, byDeploy)
	deploySess, err := first.Prepare(ctx, f.spec(t, runID("bydeploy")))
	if err != nil {
		t.Fatal(err)
	}
	jobPod := podOf(t, deploySess)
	if refs := f.storedPod(t, jobPod).OwnerReferences; len(refs) != 1 || refs[0].UID != byDeploy.Owner.UID {
		t.Fatalf("job pod's owner references %+v, want the Deployment %s", refs, byDeploy.Owner.UID)
	}
	// A step that outlives the runner pod: it counts for ~20 s while
	// nobody is connected.
	const count = `i=0; while [ $i -lt 200 ]; do echo "line $i"; i=$((i+1)); sleep 0.1; done`
	startStep(ctx, deploySess, executor.Step{ID: "count", Name: "count", Script: count}, &syncbuf.Buffer{})
	if err := deploySess.Detach(); err != nil {
		t.Fatalf("detach: %v", err)
	}

	if err := f.c.Client.CoreV1().Pods(f.ns).Delete(ctx, runnerPod.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
		t.Fatal(err)
	}
	gone := f.waitGone(t, podOf(t, podSess), 90*time.Second)
	t.Logf("the job pod owned by the runner pod was deleted by the garbage collector %s after the runner pod's deletion", gone.Round(time.Millisecond))
	if p := f.storedPod(t, jobPod); p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning {
		t.Fatalf("the job pod owned by the Deployment is %s (deleting %v), want still running", p.Status.Phase, p.DeletionTimestamp)
	}

	// The successor adopts it and the step is still going.
	second := f.executor(t, byDeploy)
	rec, err := second.Recover(ctx, deploySess.Handle())
	if err != nil {
		t.Fatalf("the successor cannot recover the job pod: %v", err)
	}
	// Attached again from byte 0, the step's whole output is there:
	// it never stopped.
	var out syncbuf.Buffer
	res, err := await(t, startStep(ctx, rec, executor.Step{ID: "count", Name: "count", Script: count}, &out), 2*time.Minute)
	var want strings.Builder
	for i := 0; i < 200; i++ {
		fmt.Fprintf(&want, "line %d\n", i)
	}
	if err != nil || res.ExitCode != 0 || string(out.Bytes()) != want.String() {
		t.Fatalf("the step in the adopted pod: %+v %v; output whole: %v (%d bytes)", res, err, string(out.Bytes()) == want.String(), len(out.Bytes()))
	}
	if err := rec.Detach(); err != nil {
		t.Fatal(err)
	}

	// Removing the runner (its Deployment, as kubectl delete -k does:
	// background propagation) removes its job pods.
	if err := f.c.Client.AppsV1().Deployments(f.ns).Delete(ctx, runnerDeployment, metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationBackground)}); err != nil {
		t.Fatal(err)
	}
	gone = f.waitGone(t, jobPod, 90*time.Second)
	t.Logf("the job pod owned by the Deployment was gone %s after the Deployment's deletion", gone.Round(time.Millisecond))
}

// --owner naming an object the Role does not cover fails the runner's
// start with the rule to add, not a bare Forbidden.
func TestKube_OwnerTheRunnerMayNotReadNamesTheRoleRuleToAdd(t *testing.T) {
	f := newFixture(t)
	client, err := kubernetes.NewForConfig(f.rest)
	if err != nil {
		t.Fatal(err)
	}
	_, err = kube.ResolveOwner(context.Background(), client, f.ns, "deployment", "knotless-runner")
	if err == nil || !strings.Contains(err.Error(), "{apiGroups: [apps], resources: [deployments], resourceNames: [knotless-runner], verbs: [get]}") {
		t.Fatalf("err = %v, want it to name the Role rule", err)
	}
	for _, bad := range []string{"deployment", "job/x", "deployment/Bad_Name", "/x"} {
		if _, _, err := kube.ParseOwner(bad); err == nil {
			t.Errorf("ParseOwner(%q) accepted it", bad)
		}
	}
	if k, n, err := kube.ParseOwner("deploy/knotless-runner"); err != nil || k != "deployment" || n != "knotless-runner" {
		t.Errorf("ParseOwner(deploy/knotless-runner) = %q %q %v", k, n, err)
	}
}
