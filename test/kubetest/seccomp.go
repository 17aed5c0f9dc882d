package kubetest

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"knotless.dev/knotless/internal/testwait"
)

// The seccomp part of deploy/kubernetes/builds: its namespace and the
// DaemonSet that writes the builder's profile on every node.
const (
	seccompNamespace = "knotless-seccomp"
	seccompDaemonSet = "knotless-builder-seccomp"
	// seccompImage and seccompHostDir are the manifests' image (not on the
	// local cluster, which pulls from no registry) and the kubelet's
	// seccomp directory of a default --root-dir.
	seccompImage   = "image: docker.io/alpine/git:v2.45.1\n"
	seccompHostDir = "path: /var/lib/kubelet/seccomp\n"
)

// InstallBuilderSeccompProfile puts the builder's seccomp profile on the
// local cluster's node as deploy/kubernetes/builds does on an operator's:
// it renders that kustomization with the cluster's kubectl (`kubectl
// kustomize`), keeps its seccomp part (the namespace knotless-seccomp,
// the ConfigMap made from builder-seccomp.json, the DaemonSet), points
// the DaemonSet's hostPath at this kubelet's seccomp directory
// (StateDir/kubelet/root/seccomp) and its image at JobBaseImage (busybox:
// the sh, cp, mv and sleep it runs), applies that server-side, and waits
// until the DaemonSet has rolled out and the node's
// seccomp/BuilderSeccompProfile holds builder-seccomp.json's bytes. It
// may run again, in any process: an unchanged apply changes nothing (a
// second or so), and a changed profile is a new ConfigMap (kustomize's
// hash suffix), so the DaemonSet rolls and writes it.
func (c *Cluster) InstallBuilderSeccompProfile(t testing.TB) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	defer cancel()
	dir := filepath.Join(moduleRoot(t), "deploy", "kubernetes", "builds")
	want, err := os.ReadFile(filepath.Join(dir, "builder-seccomp.json"))
	if err != nil {
		t.Fatal(err)
	}
	rendered, err := c.Kubectl(ctx, dir, "kustomize", ".")
	if err != nil {
		t.Fatal(err)
	}
	seccompDir := filepath.Join(c.StateDir, "kubelet", "root", "seccomp")
	manifest, err := seccompPart(rendered, seccompDir)
	if err != nil {
		t.Fatalf("deploy/kubernetes/builds: %v", err)
	}
	file := filepath.Join(t.TempDir(), "seccomp.yaml")
	if err := os.WriteFile(file, []byte(manifest), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Kubectl(ctx, "", "apply", "--server-side", "--field-manager", "knotless-test", "-f", file); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Kubectl(ctx, "", "-n", seccompNamespace, "rollout", "status", "daemonset/"+seccompDaemonSet, "--timeout=3m"); err != nil {
		pods, _ := c.Kubectl(context.Background(), "", "-n", seccompNamespace, "describe", "pods")
		t.Fatalf("the seccomp DaemonSet: %v\n%s", err, pods)
	}
	dst := filepath.Join(seccompDir, BuilderSeccompProfile)
	testwait.Until(t, time.Minute, dst+" to hold deploy/kubernetes/builds/builder-seccomp.json", func() (bool, string) {
		got, err := os.ReadFile(dst)
		if err != nil {
			return false, err.Error()
		}
		return bytes.Equal(got, want), fmt.Sprintf("%d bytes, want %d", len(got), len(want))
	})
}

// seccompPart returns the documents of rendered (deploy/kubernetes/builds,
// kustomized) in namespace knotless-seccomp, and that namespace, with the
// DaemonSet's image JobBaseImage and its host path seccompDir. Errors: a
// part missing, or the image or path not found where the manifests have
// them.
func seccompPart(rendered, seccompDir string) (string, error) {
	var keep []string
	kinds := map[string]bool{}
	for doc := range strings.SplitSeq(rendered, "\n---\n") {
		var m struct {
			Kind     string
			Metadata struct{ Name, Namespace string }
		}
		if err := yaml.Unmarshal([]byte(doc), &m); err != nil {
			return "", err
		}
		if m.Metadata.Namespace == seccompNamespace || (m.Kind == "Namespace" && m.Metadata.Name == seccompNamespace) {
			keep = append(keep, doc)
			kinds[m.Kind] = true
		}
	}
	if !kinds["Namespace"] || !kinds["ConfigMap"] || !kinds["DaemonSet"] {
		return "", fmt.Errorf("want namespace %s, a ConfigMap and a DaemonSet in it, found %v", seccompNamespace, kinds)
	}
	out := strings.Join(keep, "\n---\n")
	for _, e := range [][2]string{
		{seccompImage, "image: " + JobBaseImage + "\n"},
		{seccompHostDir, "path: " + seccompDir + "\n"},
	} {
		if !strings.Contains(out, e[0]) {
			return "", fmt.Errorf("the seccomp DaemonSet has no %q to edit", strings.TrimSpace(e[0]))
		}
		out = strings.ReplaceAll(out, e[0], e[1])
	}
	return out, nil
}
