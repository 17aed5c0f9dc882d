package kube_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"knotless.dev/knotless/internal/executor"

	authzv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"knotless.dev/knotless/internal/executor/agentenv"
	"knotless.dev/knotless/internal/executor/kube"
	"knotless.dev/knotless/test/kubetest"
)

// TestKube_StoredPodHasEveryHardeningField: every hardening field of the
// job pod is there as the API server stored it (not as the executor built
// it: an admission plugin or a defaulting could have changed it), and the
// namespace enforcing Pod Security "restricted" admitted it. It pins a job
// pod missing a hardening field.
func TestKube_StoredPodHasEveryHardeningField(t *testing.T) {
	f := newFixture(t)
	cfg := f.config()
	e := f.executor(t, cfg)
	id := runID("harden")
	s := f.prepare(t, e, f.spec(t, id))
	pod := f.storedPod(t, podOf(t, s))

	// The namespace enforces restricted, and enforces it: the same API
	// server refuses a pod without the hardening there.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ns, err := f.c.Client.CoreV1().Namespaces().Get(ctx, f.ns, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := ns.Labels["pod-security.kubernetes.io/enforce"]; got != "restricted" {
		t.Fatalf("namespace %s enforces Pod Security %q, want restricted", f.ns, got)
	}
	bad := kubetest.RestrictedPod(f.ns, "")
	bad.GenerateName = "unhardened-"
	bad.Spec.SecurityContext = nil
	bad.Spec.Containers[0].SecurityContext = nil
	_, err = f.c.Client.CoreV1().Pods(f.ns).Create(ctx, bad, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "restricted") {
		t.Fatalf("an unhardened pod in namespace %s: got %v, want a Pod Security restricted refusal", f.ns, err)
	}
	// The audit log records the admission of our pod under restricted.
	ev := f.c.WaitAuditEvent(t, time.Minute, "create of pod "+pod.Name, func(ev kubetest.AuditEvent) bool {
		return ev.Verb == "create" && ev.ObjectRef != nil && ev.ObjectRef.Resource == "pods" && ev.ObjectRef.Subresource == "" &&
			ev.ObjectRef.Namespace == f.ns && ev.Stage == "ResponseComplete" && ev.ResponseStatus != nil && ev.ResponseStatus.Code == 201 &&
			ev.User.Username == kubetest.ServiceAccountUser(f.ns, "runner") &&
			(ev.ObjectRef.Name == pod.Name || ev.ObjectRef.Name == "")
	})
	if got := ev.Annotations["pod-security.kubernetes.io/enforce-policy"]; !strings.HasPrefix(got, "restricted:") {
		t.Errorf("audit annotation pod-security.kubernetes.io/enforce-policy of the pod's create = %q, want restricted:*", got)
	}

	assertHardened(t, pod, 1000, 1000, 10*time.Minute, id)
	f.assertRuntimeClass(t, pod)
}

// assertHardened checks every hardening field of a stored job pod; uid
// -1 means the image's own user (no runAsUser/runAsGroup).
func assertHardened(t *testing.T, pod *corev1.Pod, uid, gid int64, timeout time.Duration, id string) {
	t.Helper()
	sp := pod.Spec
	psc := sp.SecurityContext
	if psc == nil {
		t.Fatal("no pod securityContext")
	}
	if len(sp.Containers) != 1 || len(sp.InitContainers) != 0 || len(sp.EphemeralContainers) != 0 {
		t.Fatalf("containers: %d, init %d, ephemeral %d; want exactly one", len(sp.Containers), len(sp.InitContainers), len(sp.EphemeralContainers))
	}
	c := sp.Containers[0]
	csc := c.SecurityContext
	if csc == nil {
		t.Fatal("no container securityContext")
	}
	isTrue := func(what string, b *bool) {
		if b == nil || !*b {
			t.Errorf("%s = %v, want true", what, b)
		}
	}
	isFalse := func(what string, b *bool) {
		if b == nil || *b {
			t.Errorf("%s = %v, want false", what, b)
		}
	}
	// In a user namespace the image's own user (uid < 0) may be root,
	// the pod's and not the node's: runAsNonRoot is then left out.
	if !(uid < 0 && sp.HostUsers != nil && !*sp.HostUsers && psc.RunAsNonRoot == nil && csc.RunAsNonRoot == nil) {
		isTrue("pod runAsNonRoot", psc.RunAsNonRoot)
		isTrue("container runAsNonRoot", csc.RunAsNonRoot)
	}
	if uid >= 0 {
		for _, x := range []struct {
			what      string
			got       *int64
			want      int64
			mayBeNull bool
		}{
			{"pod runAsUser", psc.RunAsUser, uid, false},
			{"pod runAsGroup", psc.RunAsGroup, gid, false},
			{"container runAsUser", csc.RunAsUser, uid, true},
			{"container runAsGroup", csc.RunAsGroup, gid, true},
		} {
			if x.got == nil && x.mayBeNull {
				continue
			}
			if x.got == nil || *x.got != x.want {
				t.Errorf("%s = %v, want %d", x.what, deref(x.got), x.want)
			}
		}
	} else {
		if psc.RunAsUser != nil || csc.RunAsUser != nil {
			t.Errorf("run as the image's user: runAsUser pod %v container %v, want unset", deref(psc.RunAsUser), deref(csc.RunAsUser))
		}
	}
	isTrue("readOnlyRootFilesystem", csc.ReadOnlyRootFilesystem)
	isFalse("allowPrivilegeEscalation", csc.AllowPrivilegeEscalation)
	if csc.Privileged != nil && *csc.Privileged {
		t.Error("privileged")
	}
	if csc.Capabilities == nil || len(csc.Capabilities.Drop) != 1 || csc.Capabilities.Drop[0] != "ALL" || len(csc.Capabilities.Add) != 0 {
		t.Errorf("capabilities %+v, want drop [ALL], add none", csc.Capabilities)
	}
	seccomp := psc.SeccompProfile
	if csc.SeccompProfile != nil {
		seccomp = csc.SeccompProfile
	}
	if seccomp == nil || seccomp.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("seccompProfile %+v, want RuntimeDefault", seccomp)
	}
	isFalse("automountServiceAccountToken", sp.AutomountServiceAccountToken)
	isFalse("enableServiceLinks", sp.EnableServiceLinks)
	if sp.HostNetwork || sp.HostPID || sp.HostIPC {
		t.Errorf("hostNetwork %v hostPID %v hostIPC %v, want none", sp.HostNetwork, sp.HostPID, sp.HostIPC)
	}
	if sp.RestartPolicy != corev1.RestartPolicyNever {
		t.Errorf("restartPolicy %s, want Never", sp.RestartPolicy)
	}
	if sp.ActiveDeadlineSeconds == nil {
		t.Error("no activeDeadlineSeconds")
	} else if got, min := time.Duration(*sp.ActiveDeadlineSeconds)*time.Second, timeout; got <= min || got > min+10*time.Minute {
		t.Errorf("activeDeadlineSeconds %s, want the run's timeout %s plus a margin", got, min)
	} else {
		t.Logf("activeDeadlineSeconds %s for a run timeout of %s", got, timeout)
	}
	// No token, no secret of any kind reaches the pod.
	for _, m := range c.VolumeMounts {
		if strings.Contains(m.MountPath, "serviceaccount") {
			t.Errorf("volume mount %s", m.MountPath)
		}
	}
	if len(c.Env) != 0 || len(c.EnvFrom) != 0 {
		t.Errorf("container env %v envFrom %v, want none", c.Env, c.EnvFrom)
	}
	// requests == limits for cpu, memory and ephemeral storage.
	for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory, corev1.ResourceEphemeralStorage} {
		req, okR := c.Resources.Requests[r]
		lim, okL := c.Resources.Limits[r]
		if !okR || !okL || req.Cmp(lim) != 0 {
			t.Errorf("%s: request %v (%v) limit %v (%v), want both, equal", r, req.String(), okR, lim.String(), okL)
		}
	}
	if pod.Status.QOSClass != corev1.PodQOSGuaranteed {
		t.Errorf("QoS class %s, want Guaranteed", pod.Status.QOSClass)
	}
	// Volumes: emptyDirs with a sizeLimit for each writable path; no
	// hostPath (nor any other kind).
	vols := map[string]corev1.Volume{}
	for _, v := range sp.Volumes {
		vols[v.Name] = v
		if v.HostPath != nil {
			t.Errorf("hostPath volume %s (%s)", v.Name, v.HostPath.Path)
		}
		if v.EmptyDir == nil {
			t.Errorf("volume %s is not an emptyDir: %+v", v.Name, v.VolumeSource)
		} else if v.EmptyDir.SizeLimit == nil || v.EmptyDir.SizeLimit.Sign() <= 0 {
			t.Errorf("emptyDir %s has no sizeLimit", v.Name)
		} else if disk := c.Resources.Limits[corev1.ResourceEphemeralStorage]; v.EmptyDir.SizeLimit.Cmp(disk) > 0 {
			t.Errorf("emptyDir %s sizeLimit %s exceeds the ephemeral-storage limit %s", v.Name, v.EmptyDir.SizeLimit, disk.String())
		}
	}
	mounted := map[string]bool{}
	for _, m := range c.VolumeMounts {
		v, ok := vols[m.Name]
		if ok && v.EmptyDir != nil && v.EmptyDir.SizeLimit != nil && !m.ReadOnly {
			mounted[m.MountPath] = true
		}
	}
	for _, p := range []string{kube.Workspace, kube.Home, kube.Tmp, kube.AgentDir} {
		if !mounted[p] {
			t.Errorf("%s is not a writable emptyDir with a sizeLimit (mounts %+v)", p, c.VolumeMounts)
		}
	}
	// Labels Sweep and people find the pod by.
	for k, want := range map[string]string{agentenv.LabelManagedBy: agentenv.ManagedBy, agentenv.LabelRunner: "test", agentenv.LabelRun: id} {
		if got := pod.Labels[k]; got != want {
			t.Errorf("label %s = %q, want %q", k, got, want)
		}
	}
}

func deref(p *int64) any {
	if p == nil {
		return nil
	}
	return *p
}

// TestKube_EachRunAsVariantIsApplied: each --run-as variant is applied:
// UID:GID becomes the pod's runAsUser/runAsGroup and the steps' ids;
// "image" leaves the user to the image (the job base image's USER 1000)
// with runAsNonRoot still set; an image whose user is root with "image"
// fails clearly. It pins a --run-as variant not applied to the pod.
func TestKube_EachRunAsVariantIsApplied(t *testing.T) {
	f := newFixture(t)
	t.Run("UID:GID", func(t *testing.T) {
		cfg := f.config()
		cfg.RunAs = kube.RunAs{UID: 2345, GID: 3456}
		e := f.executor(t, cfg)
		id := runID("runas")
		s := f.prepare(t, e, f.spec(t, id))
		assertHardened(t, f.storedPod(t, podOf(t, s)), 2345, 3456, 10*time.Minute, id)
		res, out, err := runStep(t, s, "1", `echo "$(id -u):$(id -g)"; touch "$HOME/x" /tmp/x ./x`, time.Minute)
		if err != nil || res.ExitCode != 0 || strings.TrimSpace(string(out)) != "2345:3456" {
			t.Fatalf("step as 2345:3456: %+v %v %q", res, err, out)
		}
	})
	t.Run("image", func(t *testing.T) {
		cfg := f.config()
		cfg.RunAs = kube.RunAs{Image: true}
		e := f.executor(t, cfg)
		id := runID("runas-image")
		s := f.prepare(t, e, f.spec(t, id))
		assertHardened(t, f.storedPod(t, podOf(t, s)), -1, -1, 10*time.Minute, id)
		res, out, err := runStep(t, s, "1", `id -u; touch "$HOME/x" /tmp/x ./x`, time.Minute)
		if err != nil || res.ExitCode != 0 || strings.TrimSpace(string(out)) != fmt.Sprint(kubetest.UID) {
			t.Fatalf("step as the image's user: %+v %v %q, want uid %d", res, err, out, kubetest.UID)
		}
	})
	t.Run("image/root-user-image", func(t *testing.T) {
		// --run-as image with an image whose user is root, in a pod
		// without a user namespace: the kubelet's runAsNonRoot check
		// refuses to start it, and Prepare says so
		// (TestKube_RunAsImageRootOnlyInAUserNamespace: with one).
		cfg := f.config()
		cfg.RunAs, cfg.UserNamespace = kube.RunAs{Image: true}, kube.UserNamespaceOff
		e := f.executor(t, cfg)
		id := runID("runas-root")
		spec := f.spec(t, id)
		spec.Image = kubetest.JobRootImage
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		s, err := e.Prepare(ctx, spec)
		if err == nil {
			_ = s.Cleanup(context.Background())
			t.Fatal("Prepare of a root image with --run-as image succeeded")
		}
		var fault *executor.Fault
		if !errors.As(err, &fault) || !strings.Contains(fault.Message, "CreateContainerConfigError") {
			t.Fatalf("Prepare: %v; want an executor.Fault naming CreateContainerConfigError", err)
		}
		t.Logf("refused as it should be: %v", err)
	})
}

// TestKube_RunnerServiceAccountMayOnlyRunPodsInItsNamespace: least
// privilege (promise 7): the runner's ServiceAccount
// (kubetest.PodRunnerRules) may create pods and exec into them in its
// namespace, and nothing else: no secrets, no pods elsewhere. It pins a
// runner's ServiceAccount that can read the namespace's secrets.
func TestKube_RunnerServiceAccountMayOnlyRunPodsInItsNamespace(t *testing.T) {
	f := newFixture(t)
	client, err := kubernetes.NewForConfig(f.rest)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// A real secret exists, so that NotFound cannot pass for a refusal.
	sec, err := f.c.Client.CoreV1().Secrets(f.ns).Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "probe-"}, StringData: map[string]string{"k": "v"},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.CoreV1().Secrets(f.ns).Get(ctx, sec.Name, metav1.GetOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("runner get secret %s/%s: %v, want Forbidden", f.ns, sec.Name, err)
	}
	if _, err := client.CoreV1().Secrets(f.ns).List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("runner list secrets in %s: %v, want Forbidden", f.ns, err)
	}
	if _, err := client.CoreV1().Pods("default").List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("runner list pods in namespace default: %v, want Forbidden", err)
	}
	for _, a := range []struct {
		ns, verb, res, sub string
		want               bool
	}{
		{f.ns, "create", "pods", "", true},
		{f.ns, "delete", "pods", "", true},
		{f.ns, "create", "pods", "exec", true},
		{f.ns, "get", "pods", "exec", true},
		{f.ns, "get", "secrets", "", false},
		{f.ns, "create", "secrets", "", false},
		{f.ns, "create", "serviceaccounts", "token", false},
		{f.ns, "create", "pods", "attach", false},
		{f.ns, "create", "pods", "portforward", false},
		{f.ns, "get", "configmaps", "", false},
		{"default", "create", "pods", "", false},
		{"default", "create", "pods", "exec", false},
	} {
		rev, err := client.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authzv1.SelfSubjectAccessReview{
			Spec: authzv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authzv1.ResourceAttributes{
				Namespace: a.ns, Verb: a.verb, Resource: a.res, Subresource: a.sub}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if rev.Status.Allowed != a.want {
			t.Errorf("runner may %s %s/%s in %s: %v, want %v", a.verb, a.res, a.sub, a.ns, rev.Status.Allowed, a.want)
		}
	}
	// And it really runs a pod and execs into it with those rights (the
	// executor uses f.rest).
	e := f.executor(t, f.config())
	s := f.prepare(t, e, f.spec(t, runID("rbac")))
	res, out, err := runStep(t, s, "1", "echo ok", time.Minute)
	if err != nil || res.ExitCode != 0 || string(out) != "ok\n" {
		t.Fatalf("a step as the runner: %+v %v %q", res, err, out)
	}
}

// TestKube_JobImageNeedsOnlyAShell: the job image needs /bin/sh and
// nothing else the runner relies on: no tar (the checkout and outputs are
// tar streams the agent reads and writes itself), no busybox. It pins a
// job image without tar that cannot run.
func TestKube_JobImageNeedsOnlyAShell(t *testing.T) {
	f := newFixture(t)
	cfg := f.config()
	cfg.Image = kubetest.JobNoTarImage
	e := f.executor(t, cfg)
	spec := f.spec(t, runID("notar"))
	if err := os.WriteFile(filepath.Join(spec.Workspace, "in.txt"), []byte("from the checkout\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	s := f.prepare(t, e, spec)
	res, out, err := runStep(t, s, "1", "cat in.txt; mkdir -p out; echo made > out/file; command -v tar || echo no tar", time.Minute)
	if err != nil || res.ExitCode != 0 || string(out) != "from the checkout\nno tar\n" {
		t.Fatalf("step in the image without tar: %+v %v %q", res, err, out)
	}
	dst := filepath.Join(t.TempDir(), "out")
	if err := s.CopyOut(context.Background(), "out", dst); err != nil {
		t.Fatalf("CopyOut from the image without tar: %v", err)
	}
	if b, err := os.ReadFile(filepath.Join(dst, "file")); err != nil || string(b) != "made\n" {
		t.Fatalf("copied out %q, %v", b, err)
	}
}
