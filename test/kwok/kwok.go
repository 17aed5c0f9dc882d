package kwok

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// NodeAnnotation marks the nodes kwok fakes (kwok's own convention).
const NodeAnnotation = "kwok.x-k8s.io/node"

// stages are kwok's "fast" stages (its module's kustomize/stage): a node
// becomes Ready at once; a pod bound to one becomes Running at once, and
// is removed at once when deleted. No heartbeat stage: nothing here marks
// a node NotReady (no kube-controller-manager), so none is needed.
var stages = []string{
	"kustomize/stage/node/fast/node-initialize.yaml",
	"kustomize/stage/pod/fast/pod-ready.yaml",
	"kustomize/stage/pod/fast/pod-delete.yaml",
}

// StartKwok installs kwok's Exec CRD into c and starts kwok (the
// multi-call binary StartControlPlane was given, as argv[0] "kwok"; its
// module at moduleDir: ModuleDir) managing the nodes annotated
// NodeAnnotation=fake, with its server (the fake nodes' kubelet endpoint,
// where the API server sends pods/exec) on a free loopback port. kwok runs
// in a mount namespace of its own in which /bin/sh is PodShell (podshell.go),
// so that an exec into a pod with an Exec object runs in that pod's own
// root. Needs root (unshare, mount). Errors: a file, kubectl's, kwok's
// start.
func (c *ControlPlane) StartKwok(ctx context.Context, moduleDir string) error {
	var cfg strings.Builder
	for _, s := range stages {
		b, err := os.ReadFile(filepath.Join(moduleDir, s))
		if err != nil {
			return fmt.Errorf("kwok stages: %w", err)
		}
		cfg.WriteString("---\n")
		cfg.Write(b)
	}
	cfgPath := filepath.Join(c.Dir, "kwok.yaml")
	if err := os.WriteFile(cfgPath, []byte(cfg.String()), 0o600); err != nil {
		return err
	}
	if _, err := c.Kubectl(ctx, "apply", "-f", filepath.Join(moduleDir, "kustomize/crd/bases/kwok.x-k8s.io_execs.yaml")); err != nil {
		return err
	}
	if _, err := c.Kubectl(ctx, "wait", "--for=condition=Established", "crd/execs.kwok.x-k8s.io", "--timeout=60s"); err != nil {
		return err
	}
	cert, key := filepath.Join(c.Dir, "kwok.crt"), filepath.Join(c.Dir, "kwok.key")
	if err := selfSigned(cert, key); err != nil {
		return err
	}
	shell, err := c.writePodShell()
	if err != nil {
		return err
	}
	ports, err := freePorts(1)
	if err != nil {
		return err
	}
	kc, err := c.Kubeconfig(Token)
	if err != nil {
		return err
	}
	port := strconv.Itoa(ports[0])
	args := []string{"--config=" + cfgPath, "--kubeconfig=" + kc,
		"--manage-all-nodes=false", "--manage-nodes-with-annotation-selector=" + NodeAnnotation + "=fake",
		"--node-ip=127.0.0.1", "--node-port=" + port, "--server-address=127.0.0.1:" + port,
		"--tls-cert-file=" + cert, "--tls-private-key-file=" + key, "--enable-crds=Exec"}
	// /usr/bin/sh resolves to dash: the mount covers the file /bin/sh
	// names, in kwok's mount namespace only.
	script := `set -e; mount --bind "$1" "$(readlink -f /bin/sh)"; shift; exec "$@"`
	return c.start2("kwok", "/usr/bin/unshare", append([]string{"--mount", "--propagation", "private", c.realShell(), "-c", script, "kwok", shell, filepath.Join(c.Dir, "bin", "kwok")}, args...)...)
}
