package kube_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/utils/ptr"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/executor"
	"knotless.dev/knotless/internal/syncbuf"
	"knotless.dev/knotless/internal/testwait"
	"knotless.dev/knotless/internal/workflow"
	"knotless.dev/knotless/test/kubetest"
)

// TestKube_JobPodPreemptedByTheSchedulerEndsPreemptedAndIsRetried:
// preemption was tested only on a hand-made pod status
// (TestPodFault_PreemptionIsNotAnEviction). Here the real scheduler
// preempts a job pod mid-step: the job pod (priority 0, no class)
// requests most of the one node's free cpu, then a pod of a higher
// PriorityClass made for this test asks for as much, which the node can
// hold only without the job pod. The step ends errored for its
// environment with reason preempted (not evicted, not pod-lost), its log
// line says the scheduler preempted the pod for one of higher priority,
// and `retry:` retries it by default. The retry is checked at the
// executor's level: the fault's reason is one of workflow.RetryReasons
// and a default `retry: 1` retries the first attempt (the server's
// CompleteRun makes the attempt from exactly that, pinned in the
// store's tests).
//
// The node is full for the few seconds between the job pod's start and
// the preemptor's deletion: other tests' pods wait Pending meanwhile
// (the executor's PendingTimeout is 10 minutes). The preemptor requests
// what the job pod does, more than half the node's cpu, so it never fits
// beside the job pod and needs no other pod's place: the job pod is its
// only victim.
func TestKube_JobPodPreemptedByTheSchedulerEndsPreemptedAndIsRetried(t *testing.T) {
	f := newFixture(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	b := make([]byte, 4)
	_, _ = rand.Read(b)
	class := "kt-preempt-" + hex.EncodeToString(b)
	if _, err := f.c.Client.SchedulingV1().PriorityClasses().Create(ctx, &schedulingv1.PriorityClass{
		ObjectMeta:  metav1.ObjectMeta{Name: class, Labels: map[string]string{kubetest.TestLabel: "kubetest"}},
		Value:       1_000_000,
		Description: "a pod that preempts a job pod of " + t.Name(),
	}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create PriorityClass %s: %v", class, err)
	}
	t.Cleanup(func() {
		_ = f.c.Client.SchedulingV1().PriorityClasses().Delete(context.Background(), class, metav1.DeleteOptions{})
	})

	// The job pod takes all the node's free cpu but 100m, which must be
	// more than half the node's: then the preemptor, asking for as much,
	// never fits beside it, whatever other pods end meanwhile, and fits
	// once it is gone beside every pod that runs now.
	var free, allocatable int64
	testwait.Until(t, 3*time.Minute, "more than half the node's cpu free for the job pod", func() (bool, string) {
		var err error
		free, allocatable, err = freeMilliCPU(ctx, f.c)
		return err == nil && free-100 > allocatable/2, fmt.Sprintf("%dm of %dm free, %v", free, allocatable, err)
	})
	jobCPU := free - 100
	cfg := f.config()
	cfg.Job.CPUs = fmt.Sprintf("%dm", jobCPU)
	s := f.prepare(t, f.executor(t, cfg), f.spec(t, runID("preempt")))
	pod := podOf(t, s)
	jp := f.storedPod(t, pod)
	if jp.Spec.Priority != nil && *jp.Spec.Priority != 0 {
		t.Fatalf("the job pod's priority is %d, want 0 (no PriorityClass): the preemptor's %d must be higher", *jp.Spec.Priority, 1_000_000)
	}
	var out syncbuf.Buffer
	sctx, scancel := context.WithTimeout(ctx, 3*time.Minute)
	defer scancel()
	ch := startStep(sctx, s, executor.Step{ID: "1", Script: "echo started; sleep 300; echo finished"}, &out)
	waitOutput(t, &out, "started\n", time.Minute)

	preemptor := kubetest.RestrictedPod(f.ns, "preemptor")
	preemptor.Spec.PriorityClassName = class
	want := *resource.NewMilliQuantity(jobCPU, resource.DecimalSI)
	preemptor.Spec.Containers[0].Resources.Requests[corev1.ResourceCPU] = want
	preemptor.Spec.Containers[0].Resources.Limits[corev1.ResourceCPU] = want
	t.Cleanup(func() {
		// It holds the node's cpu: free it for other tests at once.
		_ = f.c.Client.CoreV1().Pods(f.ns).Delete(context.Background(), preemptor.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
	})
	if _, err := f.c.Client.CoreV1().Pods(f.ns).Create(ctx, preemptor, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create the preemptor (PriorityClass %s, %dm cpu): %v", class, jobCPU, err)
	}

	res, err := await(t, ch, 2*time.Minute)
	t.Logf("after the preemption: %+v, err %v, output %q", res, err, out.Bytes())
	if err == nil && res.Reason == "" && res.ExitCode == 0 {
		t.Fatal("the step of a preempted pod succeeded")
	}
	if res.Reason != api.ReasonPreempted {
		t.Fatalf("result %+v, err %v; want reason %s", res, err, api.ReasonPreempted)
	}
	if !strings.Contains(res.Note, "preempted by the scheduler for a pod of higher priority") {
		t.Errorf("the step's log line %q does not say the scheduler preempted the pod", res.Note)
	}
	if !executor.EnvironmentFault(res.Reason) {
		t.Errorf("reason %s is not a fault of the environment: the run would end failed, not errored", res.Reason)
	}
	if !slices.Contains(workflow.RetryReasons, res.Reason) || !(&workflow.Retry{Max: 1, When: workflow.RetryReasons}).Retries(1, res.Reason) {
		t.Errorf("reason %s is not retried by a default retry: 1", res.Reason)
	}

	// The scheduler did it: its event on the job pod, and the preemptor
	// runs where the job pod was.
	testwait.Until(t, time.Minute, "the scheduler's Preempted event on the job pod and the preemptor running", func() (bool, string) {
		evs, err := f.c.Client.CoreV1().Events(f.ns).List(ctx, metav1.ListOptions{
			FieldSelector: fields.Set{"involvedObject.name": pod, "reason": "Preempted"}.String()})
		p, perr := f.c.Client.CoreV1().Pods(f.ns).Get(ctx, preemptor.Name, metav1.GetOptions{})
		if err != nil || perr != nil {
			return false, fmt.Sprint(err, perr)
		}
		return len(evs.Items) > 0 && p.Status.Phase == corev1.PodRunning, fmt.Sprintf("%d Preempted events, preemptor %s", len(evs.Items), p.Status.Phase)
	})
}

// freeMilliCPU is the cluster's node's allocatable cpu less what its pods
// that have not ended request (as the scheduler counts: the larger of the
// containers' sum and any init container's, plus the pod's overhead), and
// the allocatable cpu.
func freeMilliCPU(ctx context.Context, c *kubetest.Cluster) (free, allocatable int64, err error) {
	node, err := c.Client.CoreV1().Nodes().Get(ctx, c.NodeName, metav1.GetOptions{})
	if err != nil {
		return 0, 0, err
	}
	allocatable = node.Status.Allocatable.Cpu().MilliValue()
	free = allocatable
	pods, err := c.Client.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + c.NodeName})
	if err != nil {
		return 0, 0, err
	}
	for _, p := range pods.Items {
		if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		var sum, initMax int64
		for _, ct := range p.Spec.Containers {
			sum += ct.Resources.Requests.Cpu().MilliValue()
		}
		for _, ct := range p.Spec.InitContainers {
			m := ct.Resources.Requests.Cpu().MilliValue()
			if ct.RestartPolicy != nil && *ct.RestartPolicy == corev1.ContainerRestartPolicyAlways {
				sum += m // a sidecar runs beside the containers
				continue
			}
			initMax = max(initMax, m)
		}
		free -= max(sum, initMax) + p.Spec.Overhead.Cpu().MilliValue()
	}
	return free, allocatable, nil
}
