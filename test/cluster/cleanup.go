package cluster

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// stopAll stops every process Up started, in reverse start order, then
// removes what the pods left: their processes (found through the kubepods
// cgroups), containerd's shims for our socket, mounts, network namespaces,
// the bridge, IPAM reservations and the netfilter rules of kube-proxy,
// kube-network-policies and the harness. It works the same after a clean
// stop and after every process was killed abruptly (stale pid files).
func (c Config) stopAll(ctx context.Context) {
	procs := c.processes()
	for i := len(procs) - 1; i >= 1; i-- { // all but containerd
		c.stop(procs[i], 5*time.Second)
	}
	c.killPodProcesses()
	c.killShims()
	c.stop(procs[0], 5*time.Second) // containerd
	c.unmountAll()
	c.cleanNetwork(ctx)
}

// killPodProcesses SIGKILLs every process in a kubepods cgroup (cgroup v1
// hierarchies and v2) and removes those cgroups, deepest first.
func (c Config) killPodProcesses() {
	pids := podPIDs()
	for _, pid := range pids {
		if pid > 1 {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	if len(pids) > 0 {
		c.Log.Info("killed pod processes left behind", "count", len(pids))
	}
	var dirs []string
	for _, root := range kubepodsRoots() {
		_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
	}
	sort.Slice(dirs, func(i, j int) bool { return len(dirs[i]) > len(dirs[j]) })
	deadline := time.Now().Add(5 * time.Second)
	for _, d := range dirs {
		for os.Remove(d) != nil && time.Now().Before(deadline) {
			if _, err := os.Stat(d); errors.Is(err, fs.ErrNotExist) {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}

// killShims SIGKILLs containerd-shim processes serving our containerd, so no
// shim of ours outlives the cluster.
func (c Config) killShims() {
	for _, pid := range c.shimPIDs() {
		c.Log.Info("killing containerd shim", "pid", pid)
		killAndWait(pid, syscall.SIGKILL, 0)
	}
}

// unmountAll lazily unmounts every mount point under the state directory
// and the network namespaces the CRI plugin made (/run/netns/cni-*), deepest
// first, then removes those namespace files. A namespace mount hidden
// under a later bind mount of /run/netns over itself (what `ip netns add`
// does when the directory is not a mount point yet) cannot be unmounted by
// its path: it then detaches that bind mount too and tries again.
func (c Config) unmountAll() {
	for attempt := 0; ; attempt++ {
		points := c.leftoverMounts()
		if len(points) == 0 {
			break
		}
		if attempt == 2 {
			c.Log.Warn("mounts left after unmounting", "paths", points)
			break
		}
		if attempt == 1 {
			_ = syscall.Unmount(netnsDir, syscall.MNT_DETACH)
		}
		for _, p := range points {
			if err := syscall.Unmount(p, syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) && !errors.Is(err, syscall.ENOENT) {
				c.Log.Warn("unmount", "path", p, "err", err)
			}
		}
		c.Log.Info("unmounted leftovers", "count", len(points))
	}
	for _, dir := range []string{netnsDir, "/var/run/netns"} {
		ns, _ := filepath.Glob(filepath.Join(dir, "cni-*"))
		for _, p := range ns {
			_ = os.Remove(p)
		}
	}
}

// leftoverMounts lists the mount points under the state directory and the
// CRI plugin's network namespaces, deepest first.
func (c Config) leftoverMounts() []string {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	defer f.Close()
	var points []string
	s := bufio.NewScanner(f)
	s.Buffer(make([]byte, 64*1024), 1024*1024)
	for s.Scan() {
		fields := strings.Fields(s.Text())
		if len(fields) < 5 {
			continue
		}
		p := unescapeMount(fields[4])
		if strings.HasPrefix(p, c.StateDir+"/") || isCNINetns(p) {
			points = append(points, p)
		}
	}
	sort.Slice(points, func(i, j int) bool { return len(points[i]) > len(points[j]) })
	return points
}

// netnsDir is where the CRI plugin (and `ip netns`) mount network
// namespaces.
const netnsDir = "/run/netns"

// shareNetnsDir makes /run/netns a shared mount point of its own (a bind
// mount of itself), as `ip netns add` does the first time it runs, before
// the CRI plugin mounts namespaces in it: a later `ip netns add` then finds
// a mount point and only marks it shared, instead of binding the directory
// over itself and hiding the namespaces mounted in it from their paths.
func shareNetnsDir() error {
	if err := os.MkdirAll(netnsDir, 0o755); err != nil {
		return err
	}
	err := syscall.Mount("", netnsDir, "none", syscall.MS_SHARED|syscall.MS_REC, "")
	if err == nil || !errors.Is(err, syscall.EINVAL) {
		return err
	}
	if err := syscall.Mount(netnsDir, netnsDir, "none", syscall.MS_BIND|syscall.MS_REC, ""); err != nil {
		return err
	}
	return syscall.Mount("", netnsDir, "none", syscall.MS_SHARED|syscall.MS_REC, "")
}

func isCNINetns(p string) bool {
	return (strings.HasPrefix(p, "/run/netns/cni-") || strings.HasPrefix(p, "/var/run/netns/cni-"))
}

// unescapeMount decodes mountinfo's octal escapes (\040 for space, ...).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// harnessChain is our own iptables chain in the filter table, jumped to from
// FORWARD: it drops pod traffic that would leave the machine.
const harnessChain = "KNOTLESS-TEST-CLUSTER"

// cleanNetwork removes the bridge, IPAM reservations, kube-proxy's rules
// (`kube-proxy --cleanup`), kube-network-policies' nftables table and the
// harness's chain. Each step is best effort: a missing object is fine.
func (c Config) cleanNetwork(ctx context.Context) {
	if _, err := os.Stat("/sys/class/net/" + BridgeName); err == nil {
		if _, err := run(ctx, "ip", "link", "delete", BridgeName); err != nil {
			c.Log.Warn("delete bridge", "err", err)
		}
	}
	_ = os.RemoveAll(c.path("cni", "ipam"))
	if _, err := os.Stat(c.bin("kube-proxy")); err == nil {
		if out, err := run(ctx, c.bin("kube-proxy"), "--cleanup"); err != nil {
			c.Log.Warn("kube-proxy --cleanup", "err", err, "output", lastLines(out, 5))
		}
	}
	for _, fam := range []string{"inet", "ip", "ip6"} {
		_, _ = run(ctx, "nft", "delete", "table", fam, "kube-network-policies")
	}
	removeKubeChains(ctx)
	c.removeForwardRule(ctx)
}

// removeKubeChains deletes what is left of the Kubernetes iptables chains
// (KUBE-*) in IPv4 and IPv6 after kube-proxy's own cleanup: the kubelet's
// KUBE-FIREWALL, KUBE-KUBELET-CANARY and KUBE-IPTABLES-HINT, and any rule of
// a built-in chain that jumps to one of them.
func removeKubeChains(ctx context.Context) {
	for _, bin := range []string{"iptables", "ip6tables"} {
		for _, table := range []string{"filter", "nat", "mangle", "raw"} {
			out, err := run(ctx, bin, "-w", "-t", table, "-S")
			if err != nil {
				continue
			}
			var chains []string
			for _, line := range strings.Split(out, "\n") {
				f := splitRule(line)
				switch {
				case len(f) >= 2 && f[0] == "-N" && strings.HasPrefix(f[1], "KUBE-"):
					chains = append(chains, f[1])
				case len(f) >= 2 && f[0] == "-A" && !strings.HasPrefix(f[1], "KUBE-") && jumpsToKube(f):
					_, _ = run(ctx, bin, append([]string{"-w", "-t", table, "-D"}, f[1:]...)...)
				}
			}
			for _, op := range []string{"-F", "-X"} {
				for _, ch := range chains {
					_, _ = run(ctx, bin, "-w", "-t", table, op, ch)
				}
			}
		}
	}
}

func jumpsToKube(rule []string) bool {
	for i, a := range rule {
		if (a == "-j" || a == "-g") && i+1 < len(rule) && strings.HasPrefix(rule[i+1], "KUBE-") {
			return true
		}
	}
	return false
}

// splitRule splits one line of `iptables -S` into arguments, honouring the
// double quotes it puts around arguments with spaces (comments).
func splitRule(line string) []string {
	var args []string
	var cur strings.Builder
	inQuote, have := false, false
	for i := 0; i < len(line); i++ {
		ch := line[i]
		switch {
		case ch == '\\' && inQuote && i+1 < len(line):
			i++
			cur.WriteByte(line[i])
		case ch == '"':
			inQuote, have = !inQuote, true
		case ch == ' ' && !inQuote:
			if have {
				args = append(args, cur.String())
				cur.Reset()
				have = false
			}
		default:
			cur.WriteByte(ch)
			have = true
		}
	}
	if have {
		args = append(args, cur.String())
	}
	return args
}

// hostNetwork sets the sysctls pods need (IPv4 forwarding, bridged traffic
// through iptables) and installs the harness chain: pod traffic leaving by
// the uplink interface is dropped, so no pod reaches beyond this machine.
func (c Config) hostNetwork(ctx context.Context) error {
	if _, err := os.Stat("/proc/sys/net/bridge"); err != nil {
		_, _ = run(ctx, "modprobe", "br_netfilter")
	}
	for _, s := range []struct{ path, val string }{
		{"/proc/sys/net/ipv4/ip_forward", "1"},
		{"/proc/sys/net/bridge/bridge-nf-call-iptables", "1"},
	} {
		if err := os.WriteFile(s.path, []byte(s.val), 0o644); err != nil {
			return fmt.Errorf("set %s=%s (needs the br_netfilter module): %w", s.path, s.val, err)
		}
	}
	c.removeForwardRule(ctx)
	steps := [][]string{
		{"-N", harnessChain},
		{"-A", harnessChain, "-s", "10.244.0.0/16", "-o", c.Interface, "-j", "DROP"},
		{"-I", "FORWARD", "1", "-j", harnessChain},
	}
	for _, args := range steps {
		if _, err := run(ctx, "iptables", append([]string{"-w", "-t", "filter"}, args...)...); err != nil {
			return err
		}
	}
	return nil
}

func (c Config) removeForwardRule(ctx context.Context) {
	for {
		if _, err := run(ctx, "iptables", "-w", "-t", "filter", "-D", "FORWARD", "-j", harnessChain); err != nil {
			break
		}
	}
	_, _ = run(ctx, "iptables", "-w", "-t", "filter", "-F", harnessChain)
	_, _ = run(ctx, "iptables", "-w", "-t", "filter", "-X", harnessChain)
}

// resetRuntimeState removes everything a previous cluster left that a new
// one must not inherit: etcd's data, the kubelet's and containerd's state,
// IPAM reservations, pod logs and pid files. PKI, configs and logs stay.
func (c Config) resetRuntimeState() error {
	for _, d := range []string{"etcd", "kubelet/root", "kubelet/pki", "containerd/root", "run", "cni/ipam", "pod-logs", "pids"} {
		if err := os.RemoveAll(c.path(d)); err != nil {
			return fmt.Errorf("reset %s (is something still mounted there?): %w", c.path(d), err)
		}
	}
	return nil
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
