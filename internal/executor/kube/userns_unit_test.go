package kube

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/executor"
)

// TestPodFor_UserNamespaceKeepsEveryHardeningField pins the pod a job
// gets with a user namespace (issue 34): hostUsers false and every field
// of the restricted pod as before; runAsNonRoot left out only for
// --run-as image (the image's root is the pod's own there, and Pod
// Security does not check the field for such pods), kept for a pod that
// asks for none, whose root would be the node's.
func TestPodFor_UserNamespaceKeepsEveryHardeningField(t *testing.T) {
	spec := func(runAs executor.RunAs, userns bool) podSpec {
		return podSpec{Namespace: "ci", GenerateName: "knotless-x-", Image: "img", CPU: resource.MustParse("1"),
			Memory: resource.MustParse("1Gi"), Disk: resource.MustParse("1Gi"), Deadline: time.Minute, RunAs: runAs,
			Command: []string{"/bin/sh"}, UserNamespace: userns,
			Services: []serviceSpec{{Service: executor.Service{Name: "db", Image: "db"}, CPU: resource.MustParse("1"), Memory: resource.MustParse("1Gi"), Disk: resource.MustParse("1Gi")}}}
	}
	for _, c := range []struct {
		runAs      executor.RunAs
		userns     bool
		hostUsers  *bool
		nonRootSet bool
	}{
		{executor.DefaultRunAs, true, ptr.To(false), true},
		{executor.RunAs{Image: true}, true, ptr.To(false), false},
		{executor.DefaultRunAs, false, nil, true},
		{executor.RunAs{Image: true}, false, nil, true},
	} {
		p := podFor(spec(c.runAs, c.userns))
		name := "run-as " + c.runAs.String() + map[bool]string{true: ", user namespace", false: ", none"}[c.userns]
		if (p.Spec.HostUsers == nil) != (c.hostUsers == nil) || p.Spec.HostUsers != nil && *p.Spec.HostUsers != *c.hostUsers {
			t.Errorf("%s: hostUsers %v, want %v", name, p.Spec.HostUsers, c.hostUsers)
		}
		if got := p.Spec.SecurityContext.RunAsNonRoot != nil; got != c.nonRootSet {
			t.Errorf("%s: pod runAsNonRoot set %v, want %v", name, got, c.nonRootSet)
		}
		for _, ctr := range append(p.Spec.Containers, p.Spec.InitContainers...) {
			sc := ctr.SecurityContext
			if got := sc.RunAsNonRoot != nil; got != c.nonRootSet {
				t.Errorf("%s: container %s runAsNonRoot set %v, want %v", name, ctr.Name, got, c.nonRootSet)
			}
			if sc.RunAsNonRoot != nil && !*sc.RunAsNonRoot {
				t.Errorf("%s: container %s runAsNonRoot false", name, ctr.Name)
			}
			if !*sc.ReadOnlyRootFilesystem || *sc.AllowPrivilegeEscalation || *sc.Privileged || len(sc.Capabilities.Drop) != 1 || sc.Capabilities.Drop[0] != "ALL" ||
				sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault || len(sc.Capabilities.Add) != 0 {
				t.Errorf("%s: container %s lost a hardening field: %+v", name, ctr.Name, sc)
			}
		}
		if *p.Spec.AutomountServiceAccountToken || p.Spec.HostPID || p.Spec.HostNetwork || p.Spec.HostIPC ||
			p.Spec.SecurityContext.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
			t.Errorf("%s: the pod lost a hardening field", name)
		}
	}
}

// TestSandboxEventFault_UserNamespaceRefusalEndsThePodAtOnce pins that a
// pod whose runtime cannot make its user namespace (gVisor's runsc: the
// event below is the local cluster's) is known at once, not after the
// sandbox grace, so that --user-namespace auto makes it again without one
// and required ends the run naming the node; a pod that asked for none is
// read as any other sandbox failure.
func TestSandboxEventFault_UserNamespaceRefusalEndsThePodAtOnce(t *testing.T) {
	now := time.Now()
	said := `Failed to create pod sandbox: rpc error: code = Unknown desc = failed to start sandbox "b8c9": failed to create containerd task: failed to create shim task: OCI runtime create failed: creating container: cannot create gofer process: gofer: error setting namespace of type user and path "/run/containerd/io.containerd.grpc.v1.cri/sandboxes/b8c9/pinned-namespaces/user": invalid argument`
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "job-1", UID: "u1"},
		Spec: corev1.PodSpec{NodeName: "vm", RuntimeClassName: ptr.To("gvisor"), HostUsers: ptr.To(false)}}
	f := sandboxEventFault(pod, []corev1.Event{sandboxEvent("u1", now, said)}, now, now, time.Minute)
	if f == nil {
		t.Fatal("no fault one second in")
	}
	if f.Reason != api.ReasonExecutor || !strings.Contains(f.Message, "node vm cannot give the job pod a user namespace (RuntimeClass gvisor)") || !strings.Contains(f.Message, said) {
		t.Errorf("fault %+v", f)
	}
	if !usernsRefused(pod, f) {
		t.Error("usernsRefused does not recognise the fault")
	}
	pod.Spec.HostUsers = nil
	if f := sandboxEventFault(pod, []corev1.Event{sandboxEvent("u1", now, said)}, now, now, time.Minute); f != nil {
		t.Errorf("a pod that asked for no user namespace: %+v before the grace", f)
	}
}
