package kube_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"knotless.dev/knotless/internal/executor"
	"knotless.dev/knotless/internal/executor/kube"
	"knotless.dev/knotless/internal/syncbuf"
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
	// The builder gets the same: two builds pods at once fit the node
	// beside the other tests' pods.
	cfg.CPUs, cfg.Memory, cfg.Disk = "200m", 512<<20, 1<<30
	return f, cfg
}

// buildContext writes a Dockerfile with two stages, ARG, RUN (as the
// build's root and as USER 1000), COPY --from, and the static busybox it
// needs (no image can be pulled: the stages are FROM scratch) into dir;
// the image it makes has busybox's applets in /bin, so a job pod can run
// it.
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
RUN ["/bin/busybox", "--install", "-s", "/bin"]
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
	fault, _ := prepareFault(t, e, spec)
	if fault.Reason != "unsupported" || !strings.Contains(fault.Message, "--builds-namespace") || !strings.Contains(fault.Message, "container-builds: true") {
		t.Fatalf("Prepare: %v; want an executor fault naming --builds-namespace", fault)
	}
	pods, err := f.c.Client.CoreV1().Pods(f.ns).List(context.Background(), metav1.ListOptions{})
	if err != nil || len(pods.Items) != 0 {
		t.Errorf("pods in %s after the refusal: %v %v", f.ns, pods, err)
	}
}

// TestKube_ContainerBuildCancelledMidRunLeavesNothing pins a build
// cancelled while its RUN runs: the step ends cancelled, the RUN's process
// (seen on the node, in the builder's nested namespaces) is gone within
// seconds, and once the run's pod is deleted the node has no mount of it
// and no BuildKit mount left (within the kubelet's housekeeping: a memory
// emptyDir was seen mounted just after the API object was gone).
func TestKube_ContainerBuildCancelledMidRunLeavesNothing(t *testing.T) {
	f, cfg := buildsFixture(t)
	e := f.executor(t, cfg)
	spec := f.spec(t, runID("build-cancel"))
	spec.ContainerBuilds = true
	buildContext(t, spec.Workspace)
	const sleeper = "/bin/busybox sleep 313"
	if err := os.WriteFile(filepath.Join(spec.Workspace, "Dockerfile.sleep"), []byte("FROM scratch\nCOPY busybox /bin/busybox\nRUN [\"/bin/busybox\", \"sleep\", \"313\"]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	pctx, pcancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer pcancel()
	s, err := e.Prepare(pctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	var h struct{ Namespace, Pod string }
	_ = json.Unmarshal(s.Handle().Data, &h)
	pod, err := f.c.Client.CoreV1().Pods(h.Namespace).Get(pctx, h.Pod, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var out syncbuf.Buffer
	done := startStep(ctx, s, executor.Step{ID: "1", Name: "build", Script: "buildctl build --frontend dockerfile.v0 --local context=. --local dockerfile=. --opt filename=Dockerfile.sleep --output type=local,dest=out"}, &out)
	for deadline := time.Now().Add(time.Minute); hostPID(sleeper) == ""; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			cancel()
			t.Fatalf("the build's RUN never started:\n%s", out.Bytes())
		}
	}
	cancel()
	res, _ := await(t, done, time.Minute)
	if res.Reason != "cancelled" {
		t.Errorf("the cancelled build step: %+v", res)
	}
	for deadline := time.Now().Add(30 * time.Second); hostPID(sleeper) != ""; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the build's RUN still runs 30 s after its step was cancelled")
		}
	}
	cctx, ccancel := context.WithTimeout(context.Background(), time.Minute)
	defer ccancel()
	if err := s.Cleanup(cctx); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(200 * time.Millisecond) {
		if _, err := f.c.Client.CoreV1().Pods(h.Namespace).Get(cctx, h.Pod, metav1.GetOptions{}); err != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("pod %s/%s still there a minute after the cleanup", h.Namespace, h.Pod)
		}
	}
	// The kubelet tears the pod's volumes down after the API object is
	// gone (its housekeeping, every few seconds).
	var left []string
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(250 * time.Millisecond) {
		mounts, err := os.ReadFile("/proc/mounts")
		if err != nil {
			t.Fatal(err)
		}
		left = left[:0]
		for line := range strings.Lines(string(mounts)) {
			if strings.Contains(line, string(pod.UID)) || strings.Contains(line, "buildkit") {
				left = append(left, strings.TrimSpace(line))
			}
		}
		if len(left) == 0 || time.Now().After(deadline) {
			break
		}
	}
	if len(left) > 0 {
		t.Errorf("left on the node a minute after the pod was deleted:\n%s", strings.Join(left, "\n"))
	}
}

// TestKube_ContainerBuildBadInputsSayWhat pins the errors of a build's
// bad inputs, each where the user looks: a Dockerfile that does not parse
// names its line (BuildKit's own words in the step's log); a build that
// fills the job's disk ends the run evicted, naming the builder's volume
// (or container) and its limit, the node still Ready; a node whose runtime cannot give a
// user namespace (the local cluster's gVisor) ends the run errored before
// any step, naming the node.
func TestKube_ContainerBuildBadInputsSayWhat(t *testing.T) {
	f, cfg := buildsFixture(t)
	t.Run("dockerfile that does not parse", func(t *testing.T) {
		e := f.executor(t, cfg)
		spec := f.spec(t, runID("build-parse"))
		spec.ContainerBuilds = true
		buildContext(t, spec.Workspace)
		if err := os.WriteFile(filepath.Join(spec.Workspace, "Dockerfile.bad"), []byte("FROM scratch\nFORM busybox\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		s := f.prepare(t, e, spec)
		res, out, err := runStep(t, s, "1", "buildctl build --frontend dockerfile.v0 --local context=. --local dockerfile=. --opt filename=Dockerfile.bad", 2*time.Minute)
		if err != nil || res.ExitCode == 0 || !strings.Contains(string(out), "line 2") || !strings.Contains(string(out), "unknown instruction") {
			t.Errorf("a Dockerfile with an unknown instruction on line 2: %+v %v\n%s", res, err, out)
		}
	})
	t.Run("build fills the disk", func(t *testing.T) {
		c := cfg
		c.Disk = 256 << 20
		e := f.executor(t, c)
		spec := f.spec(t, runID("build-disk"))
		spec.ContainerBuilds = true
		buildContext(t, spec.Workspace)
		if err := os.WriteFile(filepath.Join(spec.Workspace, "Dockerfile.big"), []byte("FROM scratch\nCOPY busybox /bin/busybox\nRUN [\"/bin/busybox\", \"sh\", \"-c\", \"/bin/busybox dd if=/dev/zero of=/big bs=1M count=700; /bin/busybox sleep 120\"]\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		s := f.prepare(t, e, spec)
		res, out, err := runStep(t, s, "1", "buildctl build --frontend dockerfile.v0 --local context=. --local dockerfile=. --opt filename=Dockerfile.big", 3*time.Minute)
		var fault *executor.Fault
		if errors.As(err, &fault) {
			res.Reason, res.Note = fault.Reason, fault.Message
		}
		// The kubelet names the builder's volume (builder-state, where
		// BuildKit keeps the layers) or its container.
		if res.Reason != "evicted" || !strings.Contains(res.Note, "builder") {
			t.Errorf("a build writing 700 MB with --disk 256Mi: %+v %v\n%s", res, err, out)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		nodes, err := f.c.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range nodes.Items {
			for _, c := range n.Status.Conditions {
				if c.Type == corev1.NodeReady && c.Status != corev1.ConditionTrue {
					t.Errorf("node %s not Ready after the full disk: %s", n.Name, c.Message)
				}
			}
		}
	})
	t.Run("no user namespace", func(t *testing.T) {
		c := cfg
		c.RuntimeClass = kubetest.GVisor
		e := f.executor(t, c)
		spec := f.spec(t, runID("build-nouserns"))
		spec.ContainerBuilds = true
		fault, _ := prepareFault(t, e, spec)
		if fault.Reason != "executor" || !strings.Contains(fault.Message, "cannot give the job pod a user namespace") || !strings.Contains(fault.Message, "node ") {
			t.Errorf("Prepare: %v", fault)
		}
	})
}

// TestKube_ContainerBuildPushesAndRunsItsImage pins the whole path of a
// built image on kube: a builds run pushes it to a registry with basic
// auth (the credential a secret of the step's, in buildctl's Docker
// config) with its cache (mode=max); a second builds run, in a fresh pod
// with an empty BuildKit, imports that cache and says CACHED; an ordinary
// run pulls the image by digest with a pull secret and runs in it; a
// wrong password and a registry that is down each fail the push, saying
// so in the step's log.
func TestKube_ContainerBuildPushesAndRunsItsImage(t *testing.T) {
	f, cfg := buildsFixture(t)
	reg := f.c.Registry(t)
	e := f.executor(t, cfg)
	auth := map[string]string{"DOCKER_AUTH": string(reg.DockerConfig(reg.Password))}
	login := `mkdir -p "$HOME/.docker" && printf '%s' "$DOCKER_AUTH" > "$HOME/.docker/config.json"` + "\n"
	build := "buildctl build --frontend dockerfile.v0 --local context=. --local dockerfile=. " +
		"--output type=image,name=" + reg.Addr + "/app:1,push=true,registry.insecure=true " +
		"--export-cache type=registry,ref=" + reg.Addr + "/app:cache,mode=max,registry.insecure=true " +
		"--import-cache type=registry,ref=" + reg.Addr + "/app:cache,registry.insecure=true " +
		"--metadata-file meta.json\n"
	step := func(s executor.Session, id, script string, secrets map[string]string) (executor.Result, string) {
		ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
		defer cancel()
		var out syncbuf.Buffer
		res, err := await(t, startStep(ctx, s, executor.Step{ID: id, Name: id, Script: script, Secrets: secrets}, &out), 3*time.Minute)
		if err != nil {
			t.Fatalf("step %s: %v\n%s", id, err, out.Bytes())
		}
		return res, string(out.Bytes())
	}
	prepare := func(id string) executor.Session {
		spec := f.spec(t, runID(id))
		spec.ContainerBuilds = true
		buildContext(t, spec.Workspace)
		return f.prepare(t, e, spec)
	}

	first := prepare("push")
	res, out := step(first, "push", login+build+"cat meta.json", auth)
	if res.ExitCode != 0 {
		t.Fatalf("build and push: %+v\n%s", res, out)
	}
	digest := regexp.MustCompile(`"containerimage.digest": *"(sha256:[0-9a-f]{64})"`).FindStringSubmatch(out)
	if digest == nil {
		t.Fatalf("no digest in the metadata:\n%s", out)
	}

	// The second builder must start empty: a fresh pod (and the first's
	// gone, so that both fit the node).
	cctx, ccancel := context.WithTimeout(context.Background(), time.Minute)
	if err := first.Cleanup(cctx); err != nil {
		t.Fatal(err)
	}
	ccancel()
	second := prepare("cached")
	if res, out := step(second, "cached", login+build, auth); res.ExitCode != 0 || !strings.Contains(out, "CACHED") {
		t.Errorf("a second build in a fresh builder, importing the registry's cache: %+v, no CACHED step:\n%s", res, out)
	}

	run := f.config()
	run.PullPolicy, run.PullSecrets = corev1.PullIfNotPresent, []string{f.c.PullSecret(t, f.ns, reg)}
	spec := f.spec(t, runID("run-built"))
	spec.Image = reg.Addr + "/app@" + digest[1]
	s := f.prepare(t, f.executor(t, run), spec)
	if res, out, err := runStep(t, s, "1", "cat /greeting", time.Minute); err != nil || res.ExitCode != 0 || strings.TrimSpace(string(out)) != "hello from uid 0" {
		t.Errorf("the built image, pulled by digest: %+v %v %q", res, err, out)
	}

	wrong := map[string]string{"DOCKER_AUTH": string(reg.DockerConfig("not-" + reg.Password))}
	if res, out := step(second, "wrong-password", login+strings.Replace(build, "/app:1,", "/app:2,", 1), wrong); res.ExitCode == 0 || !strings.Contains(strings.ToLower(out), "401") && !strings.Contains(strings.ToLower(out), "unauthorized") {
		t.Errorf("a push with a wrong password: %+v\n%s", res, out)
	}
	reg.Stop()
	if res, out := step(second, "registry-down", login+strings.Replace(build, "/app:1,", "/app:3,", 1), auth); res.ExitCode == 0 || !strings.Contains(out, "connection refused") {
		t.Errorf("a push to a registry that is down: %+v\n%s", res, out)
	}
}
