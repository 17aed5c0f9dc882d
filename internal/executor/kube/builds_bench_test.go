package kube_test

import (
	"context"
	"fmt"
	"io"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"knotless.dev/knotless/internal/executor"
	"knotless.dev/knotless/test/kubetest"
)

// benchBuild makes a build context in /tmp/ctx (busybox and a Dockerfile
// whose RUN writes and hashes 64 MiB: work through the builder's
// snapshotter) and builds it with no cache, exporting the files.
const benchBuild = `set -e
rm -rf /tmp/ctx /tmp/out && mkdir -p /tmp/ctx && cp /bin/busybox /tmp/ctx/busybox 2>/dev/null || cp "$(command -v busybox)" /tmp/ctx/busybox
printf '%s\n' 'FROM scratch' 'COPY busybox /bin/busybox' 'RUN ["/bin/busybox", "sh", "-c", "/bin/busybox dd if=/dev/urandom of=/blob bs=1M count=64 2>/dev/null && /bin/busybox sha256sum /blob > /sum && /bin/busybox rm /blob"]' > /tmp/ctx/Dockerfile
buildctl build --no-cache --frontend dockerfile.v0 --local context=/tmp/ctx --local dockerfile=/tmp/ctx --output type=local,dest=/tmp/out >/dev/null 2>&1
test -s /tmp/out/sum`

// BenchmarkKube_ContainerBuild is a builder's cost beside the floor
// (issue 34): the same Dockerfile (a RUN that writes and hashes 64 MiB),
// built with no cache, by a builds run's builder (BuildKit in a user
// namespace nested in the pod's, not privileged, the Localhost seccomp
// profile; buildctl in the job's container) and by a privileged BuildKit
// pod on the same node (buildkitd as the node's root, buildctl beside it
// in the same container), alternating. Reported: builder-ms and
// privileged-ms (means per build) and their ratio.
//
//	KNOTLESS_TEST_CLUSTER_REQUIRED=1 go test -count=1 -run '^$' -bench 'Kube_ContainerBuild' -benchtime 5x ./internal/executor/kube
func BenchmarkKube_ContainerBuild(b *testing.B) {
	f := newFixture(b)
	if f.runtimeClass != "" {
		b.Skipf("RuntimeClass %s makes no user namespaces, which a builder needs", f.runtimeClass)
	}
	bns := f.c.BaselineNamespace(b)
	f.c.GrantRole(b, f.ns, "runner", bns, kubetest.PodRunnerRules(), f.rest)
	image := f.c.BuilderImage(b)
	cfg := f.config()
	cfg.BuildsNamespace, cfg.BuilderImage = bns, image
	cfg.CPUs, cfg.Memory, cfg.Disk = "500m", 512<<20, 1<<30
	e := f.executor(b, cfg)
	spec := executor.Spec{ID: fmt.Sprintf("bench-build-%d", time.Now().UnixNano()), Workspace: b.TempDir(), Timeout: time.Hour, ContainerBuilds: true}
	s, err := e.Prepare(context.Background(), spec)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Cleanup(context.Background()) })

	// The floor: BuildKit as a privileged pod's root, the same image and
	// resources, in a namespace of its own without Pod Security.
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	ns, err := f.c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
		GenerateName: kubetest.NamespacePrefix, Labels: map[string]string{kubetest.TestLabel: "kubetest",
			"pod-security.kubernetes.io/enforce": "privileged"}}}, metav1.CreateOptions{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		_ = f.c.Client.CoreV1().Namespaces().Delete(context.Background(), ns.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
	})
	res := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("500m"), corev1.ResourceMemory: resource.MustParse("512Mi")}
	priv := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "privileged-buildkit", Namespace: ns.Name},
		Spec: corev1.PodSpec{
			AutomountServiceAccountToken: ptr.To(false), TerminationGracePeriodSeconds: ptr.To[int64](1),
			Containers: []corev1.Container{{
				Name: "buildkitd", Image: image, ImagePullPolicy: corev1.PullNever,
				Command:         []string{"buildkitd", "--root=/var/lib/buildkit"},
				SecurityContext: &corev1.SecurityContext{Privileged: ptr.To(true)},
				Resources:       corev1.ResourceRequirements{Requests: res, Limits: res},
				VolumeMounts:    []corev1.VolumeMount{{Name: "state", MountPath: "/var/lib/buildkit"}, {Name: "tmp", MountPath: "/tmp"}},
			}},
			Volumes: []corev1.Volume{
				{Name: "state", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
				{Name: "tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
			},
		},
	}
	f.c.StartPod(b, f.c.Client, priv)
	privBuild := func() error {
		_, stderr, code, err := kubetest.Exec(ctx, f.c.Config, ns.Name, priv.Name, "buildkitd", []string{"/bin/sh", "-c", benchBuild}, nil)
		if err == nil && code != 0 {
			err = fmt.Errorf("exit %d: %s", code, stderr)
		}
		return err
	}
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(time.Second) {
		_, _, code, err := kubetest.Exec(ctx, f.c.Config, ns.Name, priv.Name, "buildkitd", []string{"buildctl", "debug", "workers"}, nil)
		if err == nil && code == 0 {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("the privileged BuildKit does not answer: %v", err)
		}
	}
	builderBuild := func(i int) error {
		res, err := s.Exec(context.Background(), executor.Step{ID: fmt.Sprint("b", i), Script: benchBuild}, io.Discard)
		if err == nil && res.ExitCode != 0 {
			err = fmt.Errorf("build step: %+v", res)
		}
		return err
	}
	// One of each first: BuildKit's first solve loads its frontend.
	if err := builderBuild(-1); err != nil {
		b.Fatal(err)
	}
	if err := privBuild(); err != nil {
		b.Fatal(err)
	}
	var builder, privileged time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		if err := builderBuild(i); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		if err := privBuild(); err != nil {
			b.Fatal(err)
		}
		builder, privileged = builder+t1.Sub(t0), privileged+time.Since(t1)
	}
	n := float64(b.N)
	b.ReportMetric(float64(builder.Milliseconds())/n, "builder-ms")
	b.ReportMetric(float64(privileged.Milliseconds())/n, "privileged-ms")
	b.ReportMetric(float64(builder)/float64(privileged), "builder/privileged")
}
