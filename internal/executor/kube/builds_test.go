package kube_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"knotless.dev/knotless/internal/executor"
	"knotless.dev/knotless/internal/executor/kube"
	"knotless.dev/knotless/test/kubetest"
)

// Tests of container builds (issue 34): a builds run's pod goes to the
// builds namespace (Pod Security baseline) with a BuildKit builder that
// is never privileged and always in a user namespace.

// buildsFixture is the fixture plus a baseline namespace where the
// runner's ServiceAccount has the same Role, and an executor config that
// allows builds there with this checkout's builder image.
func buildsFixture(t *testing.T) (*fixture, kube.Config) {
	t.Helper()
	f := newFixture(t)
	if f.runtimeClass != "" {
		t.Skipf("RuntimeClass %s makes no user namespaces, which a builder needs", f.runtimeClass)
	}
	bns := f.c.BaselineNamespace(t)
	f.c.GrantRole(t, f.ns, "runner", bns, kubetest.PodRunnerRules(), f.rest)
	cfg := f.config()
	cfg.BuildsNamespace, cfg.BuilderImage = bns, f.c.BuilderImage(t)
	cfg.CPUs, cfg.Memory, cfg.Disk = "500m", 512<<20, 1<<30 // the builder gets the same: 1 cpu of the node's 2
	return f, cfg
}

// buildContext writes a Dockerfile with two stages, ARG, RUN (as the
// build's root and as USER 1000), COPY --from, and the static busybox it
// needs (no image can be pulled: the stages are FROM scratch) into dir.
func buildContext(t *testing.T, dir string) {
	t.Helper()
	bb, err := os.ReadFile("/bin/busybox")
	if err != nil {
		t.Fatalf("the build context's busybox: %v (install busybox-static)", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "busybox"), bb, 0o755); err != nil {
		t.Fatal(err)
	}
	dockerfile := `FROM scratch AS build
COPY busybox /bin/busybox
ARG GREETING=hello
RUN ["/bin/busybox", "sh", "-c", "/bin/busybox mkdir -p /out && echo \"$GREETING from uid $(/bin/busybox id -u)\" > /out/greeting"]

FROM scratch
COPY busybox /bin/busybox
COPY --from=build /out/greeting /greeting
USER 1000:1000
RUN ["/bin/busybox", "sh", "-c", "test \"$(/bin/busybox id -u)\" = 1000"]
`
	if err := os.WriteFile(filepath.Join(dir, "Dockerfile"), []byte(dockerfile), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestKube_ContainerBuildBuildsWithoutPrivilege pins a container build on
// kube: the run's pod is in the builds namespace, admitted by Pod
// Security baseline, in a user namespace of its own; its builder is not
// privileged, has no capability but SETUID, SETGID and SETFCAP, the
// Localhost seccomp profile and /proc unmasked, while the job's container
// keeps every restricted field; a step builds a Dockerfile with two
// stages, ARG, RUN, COPY --from and USER with `buildctl` from its PATH
// (the filesystem, then an OCI image with its digest); and an ordinary
// run on the same runner gets a restricted pod without a builder, in the
// job pods' namespace.
func TestKube_ContainerBuildBuildsWithoutPrivilege(t *testing.T) {
	f, cfg := buildsFixture(t)
	e := f.executor(t, cfg)
	spec := f.spec(t, runID("build"))
	spec.ContainerBuilds = true
	buildContext(t, spec.Workspace)
	log := &lockedLog{}
	spec.Log = io.MultiWriter(log, spec.Log)
	s := f.prepare(t, e, spec)
	var h struct{ Namespace, Pod string }
	if err := json.Unmarshal(s.Handle().Data, &h); err != nil || h.Namespace != cfg.BuildsNamespace {
		t.Fatalf("the builds run's pod is in namespace %q, want %s (%v)", h.Namespace, cfg.BuildsNamespace, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pod, err := f.c.Client.CoreV1().Pods(h.Namespace).Get(ctx, h.Pod, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if pod.Spec.HostUsers == nil || *pod.Spec.HostUsers {
		t.Errorf("builds pod hostUsers %v, want false", pod.Spec.HostUsers)
	}
	var builder *corev1.Container
	for i := range pod.Spec.InitContainers {
		if pod.Spec.InitContainers[i].Name == kube.BuilderContainer {
			builder = &pod.Spec.InitContainers[i]
		}
	}
	if builder == nil {
		t.Fatal("no builder container in the builds pod")
	}
	sc := builder.SecurityContext
	caps := map[corev1.Capability]bool{}
	for _, c := range sc.Capabilities.Add {
		caps[c] = true
	}
	if sc.Privileged == nil || *sc.Privileged || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
		len(sc.Capabilities.Drop) != 1 || sc.Capabilities.Drop[0] != "ALL" || len(caps) != 3 || !caps["SETUID"] || !caps["SETGID"] || !caps["SETFCAP"] ||
		sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeLocalhost || *sc.SeccompProfile.LocalhostProfile != kubetest.BuilderSeccompProfile ||
		sc.ProcMount == nil || *sc.ProcMount != corev1.UnmaskedProcMount || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
		t.Errorf("builder securityContext %+v", sc)
	}
	job := pod.Spec.Containers[0].SecurityContext
	if !*job.RunAsNonRoot || !*job.ReadOnlyRootFilesystem || *job.AllowPrivilegeEscalation || len(job.Capabilities.Add) != 0 ||
		job.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("the job's container in a builds pod lost a restricted field: %+v", job)
	}
	if !strings.Contains(log.String(), "builder: image "+cfg.BuilderImage) || !strings.Contains(log.String(), "user namespace: uids 0-65535 -> host ") {
		t.Errorf("setup log:\n%s", log)
	}

	res, out, err := runStep(t, s, "build", `set -e
command -v buildctl
buildctl build --frontend dockerfile.v0 --local context=. --local dockerfile=. --opt build-arg:GREETING=hi --output type=local,dest=out
cat out/greeting
buildctl build --frontend dockerfile.v0 --local context=. --local dockerfile=. --output type=oci,dest=image.tar --metadata-file meta.json
grep -o '"containerimage.digest": *"sha256:[0-9a-f]*"' meta.json`, 3*time.Minute)
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("build step: %+v %v\n%s", res, err, out)
	}
	if !strings.Contains(string(out), "hi from uid 0") || !strings.Contains(string(out), `"containerimage.digest"`) || !strings.Contains(string(out), "/run/buildkit/bin/buildctl") {
		t.Errorf("build output:\n%s", out)
	}

	// An ordinary run on the same runner: restricted, no builder.
	plain := f.prepare(t, e, f.spec(t, runID("plain")))
	pp := f.storedPod(t, podOf(t, plain))
	if pp.Namespace != f.ns || len(pp.Spec.InitContainers) != 0 {
		t.Errorf("an ordinary run's pod: namespace %s, init containers %d; want %s and none", pp.Namespace, len(pp.Spec.InitContainers), f.ns)
	}
}

// TestKube_ContainerBuildRefusedWithoutTheFlag pins the refusal: a runner
// whose operator gave no --builds-namespace ends a builds run before any
// pod exists, naming the flag.
func TestKube_ContainerBuildRefusedWithoutTheFlag(t *testing.T) {
	f := newFixture(t)
	e := f.executor(t, f.config())
	spec := f.spec(t, runID("nobuild"))
	spec.ContainerBuilds = true
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := e.Prepare(ctx, spec)
	if err == nil {
		_ = s.Cleanup(ctx)
		t.Fatal("a builds run was prepared on a runner without --builds-namespace")
	}
	var fault *executor.Fault
	if !errors.As(err, &fault) || fault.Reason != "executor" || !strings.Contains(fault.Message, "--builds-namespace") || !strings.Contains(fault.Message, "container-builds: true") {
		t.Fatalf("Prepare: %v; want an executor fault naming --builds-namespace", err)
	}
	pods, err := f.c.Client.CoreV1().Pods(f.ns).List(ctx, metav1.ListOptions{})
	if err != nil || len(pods.Items) != 0 {
		t.Errorf("pods in %s after the refusal: %v %v", f.ns, pods, err)
	}
}
