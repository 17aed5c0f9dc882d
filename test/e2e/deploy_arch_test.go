package e2e

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"knotless.dev/knotless/internal/deploy"
	"knotless.dev/knotless/internal/testwait"
	"knotless.dev/knotless/test/kubetest"
)

// The manifest's init container, run in a pod whose `uname -m` says
// x86_64, aarch64 or riscv64 (a shell function put before its script: the
// image's busybox sh runs its own uname whatever PATH says), installs
// knotless-run for that architecture as /opt/knotless/bin/knotless-run
// and both agents under their release names, each the file its variable's
// digest names; on an architecture the release has no knotless-run for,
// it fails at once, naming it, and fetches nothing. The files are small
// stand-ins with their own digests: the script is under test, not the
// build.
func TestDeploy_InitContainerPicksTheRunnerForItsArchitecture(t *testing.T) {
	c := kubetest.Connect(t)
	host := c.HostIP(t)
	ensureRunnerBaseImage(t, c)
	files, digests := map[string]string{}, map[string]string{}
	dir := t.TempDir()
	for name := range deploy.ManifestFiles() {
		content := "stand-in for " + name + "\n"
		files[name] = filepath.Join(dir, name)
		if err := os.WriteFile(files[name], []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256([]byte(content))
		digests[name] = hex.EncodeToString(sum[:])
	}
	url := serveFiles(t, host, files)

	text, err := os.ReadFile(filepath.Join(moduleRoot, deploy.Manifest))
	if err != nil {
		t.Fatal(err)
	}
	var dep appsv1.Deployment
	if err := yaml.Unmarshal(text, &dep); err != nil {
		t.Fatalf("%s: %v", deploy.Manifest, err)
	}
	ns := "kt-arch-" + randomHex(4)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if _, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = c.Client.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{})
	})
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "knotless-runner"}, Data: map[string][]byte{"runner.json": []byte("{}\n")}}
	if _, err := c.Client.CoreV1().Secrets(ns).Create(ctx, secret, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct{ uname, arch string }{{"x86_64", "amd64"}, {"aarch64", "arm64"}, {"riscv64", ""}} {
		t.Run(tc.uname, func(t *testing.T) {
			pod := archPod(t, dep, tc.uname, url, digests)
			if _, err := c.Client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			var phase corev1.PodPhase
			testwait.Until(t, 3*time.Minute, "the pod to end", func() (bool, string) {
				p, err := c.Client.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
				if err != nil {
					return false, err.Error()
				}
				phase = p.Status.Phase
				return phase == corev1.PodSucceeded || phase == corev1.PodFailed, string(phase)
			})
			logs := func(container string) string {
				b, _ := c.Client.CoreV1().Pods(ns).GetLogs(pod.Name, &corev1.PodLogOptions{Container: container}).DoRaw(ctx)
				return string(b)
			}
			install := logs("install")
			if tc.arch == "" {
				if phase != corev1.PodFailed || !strings.Contains(install, "this node's architecture is "+tc.uname) ||
					!strings.Contains(install, "linux/amd64 (x86_64) and linux/arm64 (aarch64)") || strings.Contains(install, "fetching") {
					t.Fatalf("pod %s; want it failed, naming %s and the architectures there are, fetching nothing:\n%s", phase, tc.uname, install)
				}
				return
			}
			if phase != corev1.PodSucceeded {
				t.Fatalf("pod %s:\n%s\n%s", phase, install, logs("check"))
			}
			run := deploy.FileName("knotless-run", tc.arch)
			if !strings.Contains(install, "this pod's architecture: linux/"+tc.arch) || !strings.Contains(install, "fetching "+run+" from "+url+"/"+run) {
				t.Errorf("the init container did not fetch %s:\n%s", run, install)
			}
			check := logs("check")
			for path, name := range map[string]string{
				"knotless-run":               run,
				"knotless-agent-linux-amd64": "knotless-agent-linux-amd64",
				"knotless-agent-linux-arm64": "knotless-agent-linux-arm64",
			} {
				if want := digests[name] + "  " + path; !strings.Contains(check, want) {
					t.Errorf("/opt/knotless/bin/%s is not %s (want %q):\n%s", path, name, want, check)
				}
			}
			if want := "knotless-agent -> knotless-agent-linux-" + tc.arch; !strings.Contains(check, want) {
				t.Errorf("want %q:\n%s", want, check)
			}
		})
	}
}

// archPod is the runner Deployment's pod with its init container as the
// manifest has it but for `uname -m` saying uname, its download URL and
// digests given, and instead of the runner a container listing what the
// init container installed.
func archPod(t testing.TB, dep appsv1.Deployment, uname, url string, digests map[string]string) *corev1.Pod {
	t.Helper()
	spec := *dep.Spec.Template.Spec.DeepCopy()
	if len(spec.InitContainers) != 1 || len(spec.InitContainers[0].Args) != 1 {
		t.Fatalf("%s: want one init container with its script as its one argument", deploy.Manifest)
	}
	install := &spec.InitContainers[0]
	install.Image = RunnerBaseImage
	install.Args[0] = fmt.Sprintf("uname() { echo %s; }\n%s", uname, install.Args[0])
	var env []corev1.EnvVar
	for _, e := range install.Env {
		switch {
		case e.Name == "KNOTLESS_DOWNLOAD_URL":
			e = corev1.EnvVar{Name: e.Name, Value: url}
		case strings.Contains(e.Name, "_SHA256_"):
			for name, v := range deploy.ManifestFiles() {
				if v == e.Name {
					e.Value = digests[name]
				}
			}
		}
		env = append(env, e)
	}
	install.Env = env
	spec.Containers = []corev1.Container{{
		Name:            "check",
		Image:           RunnerBaseImage,
		Command:         []string{"/bin/sh", "-c", "cd /opt/knotless/bin && sha256sum knotless-run knotless-agent-linux-amd64 knotless-agent-linux-arm64 && echo \"knotless-agent -> `readlink knotless-agent`\""},
		SecurityContext: install.SecurityContext,
		VolumeMounts:    []corev1.VolumeMount{{Name: "bin", MountPath: "/opt/knotless/bin", ReadOnly: true}},
	}}
	spec.ServiceAccountName = ""
	automount := false
	spec.AutomountServiceAccountToken = &automount
	spec.RestartPolicy = corev1.RestartPolicyNever
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "install-" + strings.ReplaceAll(uname, "_", "-")}, Spec: spec}
}
