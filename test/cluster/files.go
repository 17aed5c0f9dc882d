package cluster

import (
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// writeConfigs writes every configuration file the processes read: one
// kubeconfig per component, containerd's config, the CNI network, the
// kubelet and kube-proxy configurations, the audit policy, the
// authentication configuration (no JWT issuer) and the pods' resolv.conf. It needs the PKI (ensurePKI) first.
func (c Config) writeConfigs() error {
	server := fmt.Sprintf("https://127.0.0.1:%d", APIPort)
	for _, cc := range c.clientCerts() {
		if cc.file == "apiserver-kubelet-client" {
			continue
		}
		kc, err := c.kubeconfig(server, cc.cn, cc.file)
		if err != nil {
			return err
		}
		name := cc.file + ".kubeconfig"
		if cc.file == "admin" {
			name = "admin.kubeconfig"
		}
		if err := writeFile(c.path(name), kc, 0o600); err != nil {
			return err
		}
	}
	files := map[string]string{
		"containerd/config.toml":         c.containerdConfig(),
		runscConfigFile:                  c.runscConfig(),
		"cni/net.d/10-knotless.conflist": c.cniConfig(),
		"kubelet/config.yaml":            c.kubeletConfig(),
		"kube-proxy/config.yaml":         c.kubeProxyConfig(),
		"audit-policy.yaml":              auditPolicy,
		AuthenticationConfigFile:         emptyAuthenticationConfig,
		"resolv.conf":                    "nameserver 127.0.0.1\n",
	}
	for name, content := range files {
		if err := writeFile(c.path(name), []byte(content), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// kubeconfig returns a kubeconfig (clientcmd v1) authenticating with the
// client certificate pki/FILE.{crt,key}, all data embedded.
func (c Config) kubeconfig(server, user, file string) ([]byte, error) {
	read := func(name string) (string, error) {
		b, err := os.ReadFile(c.path("pki", name))
		return base64.StdEncoding.EncodeToString(b), err
	}
	ca, err := read("ca.crt")
	if err != nil {
		return nil, err
	}
	crt, err := read(file + ".crt")
	if err != nil {
		return nil, err
	}
	key, err := read(file + ".key")
	if err != nil {
		return nil, err
	}
	return []byte(fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: knotless-test
  cluster:
    server: %s
    certificate-authority-data: %s
users:
- name: %s
  user:
    client-certificate-data: %s
    client-key-data: %s
contexts:
- name: knotless-test
  context:
    cluster: knotless-test
    user: %s
current-context: knotless-test
`, server, ca, user, crt, key, user)), nil
}

// PauseImage is the pod sandbox image (containerd's sandbox_image).
const PauseImage = "localhost/knotless/pause:1"

// RuntimeClassGVisor is the RuntimeClass Up creates for gVisor; its handler
// is RuntimeHandlerRunsc, the containerd runtime that runs pods in runsc.
const (
	RuntimeClassGVisor  = "gvisor"
	RuntimeHandlerRunsc = "runsc"
	// GVisorPodOverhead is the RuntimeClass's overhead.podFixed memory (a
	// quantity): the kubelet adds it to the pod's memory cgroup limit, which
	// with runsc holds the sandbox's own processes beside the steps.
	GVisorPodOverhead = "64Mi"
)

// runscConfigFile (relative to the state directory) is the runsc shim's
// options file: which runsc, its state root and its flags.
const runscConfigFile = "containerd/runsc.toml"

// runscConfig is the options file of containerd-shim-runsc-v1 (read
// through the runtime's ConfigPath option): STATE/bin/runsc with its state
// under STATE/run/runsc (wiped with the rest of the runtime state), the
// systrap platform (ptrace-free, no /dev/kvm needed: what runs on our VMs),
// and oci-seccomp so the pods' seccomp profile (RuntimeDefault) is applied
// inside the sandbox as runc applies it (runsc ignores it otherwise).
func (c Config) runscConfig() string {
	return fmt.Sprintf(`binary_name = %q
root = %q

[runsc_config]
  platform = "systrap"
  oci-seccomp = "true"
`, c.bin("runsc"), c.path("run", "runsc"))
}

// shimDir holds the links to the containerd shims the harness builds
// (containerd-shim-runc-v2, containerd-shim-runsc-v1): containerd looks
// shims up on its PATH, which has shimDir first, so a Debian containerd
// package's shim (docker.io brings one) is never taken for ours.
func (c Config) shimDir() string { return c.path("shims") }

// containerdConfig is containerd 2's config (version 4, what `containerd
// config migrate` writes) with the CRI plugin split in two as containerd
// 2 splits it: images (the snapshotter, the pause image pinned as the
// sandbox image) and runtime. imports is empty: the default would read the
// host's /etc/containerd/conf.d, which belongs to another containerd. The
// sockets are set on their server plugins: version 4 ignores a top-level
// [grpc] section and would serve on /run/containerd, the host's.
// restrict_oom_score_adj is required here: root lacks CAP_SYS_RESOURCE
// and runc fails to set negative oom_score_adj otherwise. Two runtime
// handlers: runc (the default; STATE/bin/runc, the one Build built) and
// runsc (gVisor, for pods of RuntimeClass gvisor), whose shim reads
// runscConfig.
func (c Config) containerdConfig() string {
	return fmt.Sprintf(`version = 4
root = %q
state = %q
imports = []
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.blockfile", "io.containerd.snapshotter.v1.erofs", "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]

[plugins.'io.containerd.server.v1.grpc']
  address = %q

[plugins.'io.containerd.server.v1.ttrpc']
  address = %q

[plugins.'io.containerd.cri.v1.images']
  snapshotter = "overlayfs"
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = %q
  [plugins.'io.containerd.cri.v1.images'.registry]
    config_path = %q

[plugins.'io.containerd.cri.v1.runtime']
  restrict_oom_score_adj = true
  enable_selinux = false
  [plugins.'io.containerd.cri.v1.runtime'.containerd]
    default_runtime_name = "runc"
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
        BinaryName = %q
        SystemdCgroup = false
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.%s]
      runtime_type = "io.containerd.runsc.v1"
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.%s.options]
        TypeUrl = "io.containerd.runsc.v1.options"
        ConfigPath = %q
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = ["/usr/lib/cni"]
    conf_dir = %q
`, c.path("containerd", "root"), c.path("run", "containerd"), c.containerdSocket(), c.containerdSocket()+".ttrpc", PauseImage, c.path(RegistryHostsDir), c.bin("runc"),
		RuntimeHandlerRunsc, RuntimeHandlerRunsc, c.path(runscConfigFile), c.path("cni", "net.d"))
}

// RegistryHostsDir is containerd's registry hosts directory, in the
// state directory (config_path: HOST:PORT/hosts.toml, read at each pull),
// where the tests' registry says how the kubelet pulls from it.
const RegistryHostsDir = "certs.d"

// cniConfig is a bridge network (cni0) with host-local IPAM over the node's
// pod range. ipMasq is off: pod traffic never leaves the machine (see
// hostNetwork's FORWARD rule).
func (c Config) cniConfig() string {
	return fmt.Sprintf(`{
  "cniVersion": "0.4.0",
  "name": "knotless",
  "plugins": [
    {
      "type": "bridge",
      "bridge": %q,
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "ranges": [[{"subnet": %q}]],
        "routes": [{"dst": "0.0.0.0/0"}],
        "dataDir": %q
      }
    },
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
`, BridgeName, NodePodCIDR, c.path("cni", "ipam"))
}

// kubeletConfig is a KubeletConfiguration (kubelet.config.k8s.io/v1beta1).
// failCgroupV1 false: 1.37 refuses cgroup v1 hosts otherwise. Image GC at
// 100% keeps locally imported images forever; evictionHard is relaxed to 1%
// so a full-ish test disk does not evict pods.
func (c Config) kubeletConfig() string {
	return fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
authentication:
  anonymous:
    enabled: false
  webhook:
    enabled: true
  x509:
    clientCAFile: %q
authorization:
  mode: Webhook
cgroupDriver: cgroupfs
failCgroupV1: false
failSwapOn: false
containerRuntimeEndpoint: unix://%s
clusterDNS: [%q]
clusterDomain: %q
resolvConf: %q
podLogsDir: %q
readOnlyPort: 0
serializeImagePulls: false
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard:
  memory.available: "100Mi"
  nodefs.available: "1%%"
  nodefs.inodesFree: "1%%"
  imagefs.available: "1%%"
`, c.path("pki", "ca.crt"), c.containerdSocket(), DNSIP, ClusterDomain, c.path("resolv.conf"), c.path("pod-logs"))
}

// kubeProxyConfig is a KubeProxyConfiguration (kubeproxy.config.k8s.io/v1alpha1)
// in iptables mode. conntrack.maxPerCore 0 leaves the kernel's limits alone:
// root cannot raise them here.
func (c Config) kubeProxyConfig() string {
	return fmt.Sprintf(`apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: iptables
clusterCIDR: %q
hostnameOverride: %q
bindAddress: 0.0.0.0
metricsBindAddress: 127.0.0.1:10249
nodePortAddresses: ["primary"]
healthzBindAddress: 127.0.0.1:10256
clientConnection:
  kubeconfig: %q
conntrack:
  maxPerCore: 0
`, PodCIDR, c.NodeName, c.path("kube-proxy.kubeconfig"))
}

// auditPolicy (audit.k8s.io/v1): full requests and responses for the
// resources whose contents tests look for, metadata for the rest.
const auditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: RequestResponse
  resources:
  - group: ""
    resources: ["pods", "pods/exec", "pods/log", "pods/attach", "secrets", "events", "configmaps"]
  - group: "events.k8s.io"
    resources: ["events"]
- level: Metadata
`

// writeLinks makes STATE/bin/PROGRAM symlinks to the multi-call binary, so
// every process has its own argv[0] (how the binary dispatches, and how
// stop finds its own processes), to the other binaries of the cache
// (containerd, ctr, runc and runsc among them; buildkitd and buildctl for
// the tests' builder image, registry for their registry), and STATE/shims/ to the
// runc and runsc shims (containerd's PATH has STATE/shims first).
func (c Config) writeLinks(b Binaries) error {
	dir := c.path("bin")
	for _, d := range []string{dir, c.shimDir()} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	links := map[string]string{"kube-network-policies": b.NetworkPolicies, "coredns": b.CoreDNS, "runsc": b.Runsc,
		"containerd": b.Containerd, "ctr": b.Ctr, "runc": b.Runc, "buildkitd": b.Buildkitd, "buildctl": b.Buildctl, "registry": b.Registry}
	for _, p := range []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet", "kube-proxy", "kubectl"} {
		links[p] = b.Kube
	}
	paths := map[string]string{
		filepath.Join(c.shimDir(), "containerd-shim-runsc-v1"): b.RunscShim,
		filepath.Join(c.shimDir(), "containerd-shim-runc-v2"):  b.RuncShim,
	}
	for name, target := range links {
		paths[filepath.Join(dir, name)] = target
	}
	for link, target := range paths {
		if cur, err := os.Readlink(link); err == nil && cur == target {
			continue
		}
		_ = os.Remove(link)
		if err := os.Symlink(target, link); err != nil {
			return err
		}
	}
	return nil
}

// bin is the path of PROGRAM's link in STATE/bin.
func (c Config) bin(program string) string { return c.path("bin", program) }

func joinFlags(flags ...string) []string {
	out := make([]string, 0, len(flags))
	for _, f := range flags {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}
