package kubetest_test

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"knotless.dev/knotless/test/kubetest"
)

// The image with no tar runs a shell, and has no tar anywhere on PATH.
func TestJobNoTarImage_RunsAShellWithoutTar(t *testing.T) {
	c := kubetest.Connect(t)
	ns := c.RestrictedNamespace(t)
	_, cfg := c.ServiceAccountKubeconfig(t, ns, "runner", kubetest.PodRunnerRules())
	pod := kubetest.RestrictedPod(ns, "notar")
	pod.Spec.Containers[0].Image = kubetest.JobNoTarImage
	pod = c.StartPod(t, mustClient(t, cfg), pod)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if err := kubetest.WaitExecReady(ctx, cfg, ns, pod.Name, kubetest.MainContainer); err != nil {
		t.Fatal(err)
	}
	out, stderr, code, err := kubetest.Exec(ctx, cfg, ns, pod.Name, kubetest.MainContainer,
		[]string{"/bin/sh", "-c", `command -v tar || echo no-tar; command -v busybox || echo no-busybox; tar --help`}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if code != 127 || string(out) != "no-tar\nno-busybox\n" {
		t.Fatalf("want no tar (command -v fails, tar exits 127); got exit %d, stdout %q, stderr %q", code, out, stderr)
	}
}

// The root image runs as root by default: in a restricted namespace the
// admission refuses runAsUser 0, the kubelet refuses runAsNonRoot without a
// runAsUser, and an explicit runAsUser (the executor's --run-as) runs it.
func TestJobRootImage_RootRefusedRunAsWorks(t *testing.T) {
	c := kubetest.Connect(t)
	ns := c.RestrictedNamespace(t)
	_, cfg := c.ServiceAccountKubeconfig(t, ns, "runner", kubetest.PodRunnerRules())
	client := mustClient(t, cfg)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()

	asRoot := kubetest.RestrictedPod(ns, "as-root")
	asRoot.Spec.Containers[0].Image = kubetest.JobRootImage
	asRoot.Spec.SecurityContext.RunAsUser = ptr.To[int64](0)
	asRoot.Spec.SecurityContext.RunAsNonRoot = nil
	asRoot.Spec.Containers[0].SecurityContext.RunAsUser = ptr.To[int64](0)
	asRoot.Spec.Containers[0].SecurityContext.RunAsNonRoot = nil
	_, err := client.CoreV1().Pods(ns).Create(ctx, asRoot, metav1.CreateOptions{})
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "restricted") {
		t.Fatalf("pod running as root in a restricted namespace: want Forbidden by Pod Security restricted, got %v", err)
	}

	imageUser := kubetest.RestrictedPod(ns, "image-user")
	imageUser.Spec.Containers[0].Image = kubetest.JobRootImage
	imageUser.Spec.SecurityContext.RunAsUser = nil
	imageUser.Spec.SecurityContext.RunAsGroup = nil
	imageUser.Spec.Containers[0].SecurityContext.RunAsUser = nil
	imageUser.Spec.Containers[0].SecurityContext.RunAsGroup = nil
	if _, err := client.CoreV1().Pods(ns).Create(ctx, imageUser, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	configError := kubetest.PodCondition{What: "container waiting CreateContainerConfigError", Done: func(p *corev1.Pod) (bool, error) {
		for _, cs := range p.Status.ContainerStatuses {
			if w := cs.State.Waiting; w != nil && w.Reason == "CreateContainerConfigError" {
				return strings.Contains(w.Message, "root"), nil
			}
		}
		return false, nil
	}}
	c.WaitPod(t, ns, imageUser.Name, configError, kubetest.PodStartTimeout)

	runAs := kubetest.RestrictedPod(ns, "run-as")
	runAs.Spec.Containers[0].Image = kubetest.JobRootImage
	runAs = c.StartPod(t, client, runAs)
	if err := kubetest.WaitExecReady(ctx, cfg, ns, runAs.Name, kubetest.MainContainer); err != nil {
		t.Fatal(err)
	}
	out, stderr, code, err := kubetest.Exec(ctx, cfg, ns, runAs.Name, kubetest.MainContainer, []string{"id", "-u"}, nil)
	if err != nil || code != 0 || strings.TrimSpace(string(out)) != "1000" {
		t.Fatalf("id -u with runAsUser 1000: exit %d, err %v, stdout %q, stderr %q", code, err, out, stderr)
	}
}
