package cluster

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// lifecycleConfig returns the running cluster's Config, or skips: these
// tests stop and start the real cluster, so they run only when
// KNOTLESS_TEST_CLUSTER_REQUIRED=1 (make test runs them after every test
// that uses the cluster) and as root.
func lifecycleConfig(t *testing.T) Config {
	t.Helper()
	if os.Getenv("KNOTLESS_TEST_CLUSTER_REQUIRED") != "1" || os.Geteuid() != 0 {
		t.Skip("restarts the real cluster: runs as root with KNOTLESS_TEST_CLUSTER_REQUIRED=1 (make test)")
	}
	c, err := Config{}.Defaults()
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func pids(c Config) map[string]int {
	m := map[string]int{}
	for _, p := range c.processes() {
		m[p.name] = c.running(p)
	}
	return m
}

// TestLifecycle runs in order: a second Up on a healthy cluster restarts
// nothing; Up after every process was SIGKILLed (pods and shims included)
// brings a working cluster back; Down leaves no process, mount, bridge or
// netfilter rule of ours; Up after Down works. It leaves the cluster up.
func TestLifecycle(t *testing.T) {
	c := lifecycleConfig(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if err := c.Up(ctx); err != nil {
		t.Fatal(err)
	}

	t.Run("UpOnHealthyClusterRestartsNothing", func(t *testing.T) {
		before := pids(c)
		if err := c.Up(ctx); err != nil {
			t.Fatal(err)
		}
		after := pids(c)
		for name, pid := range before {
			if pid == 0 || after[name] != pid {
				t.Errorf("%s: pid %d before, %d after a second Up", name, pid, after[name])
			}
		}
	})

	t.Run("UpAfterEveryProcessWasKilled", func(t *testing.T) {
		runPod(ctx, t, c, "before-kill")
		var victims []int
		for _, pid := range pids(c) {
			victims = append(victims, pid)
		}
		victims = append(victims, c.shimPIDs()...)
		victims = append(victims, podPIDs()...)
		for _, pid := range victims {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		for _, pid := range victims {
			waitGone(pid, 5*time.Second)
		}
		if err := c.Healthy(ctx); err == nil {
			t.Fatal("cluster still healthy after every process was killed")
		}
		if err := c.Up(ctx); err != nil {
			t.Fatalf("Up after an abrupt kill: %v", err)
		}
		runPod(ctx, t, c, "after-kill")
	})

	// A test of another part (the docker executor's) adding a network
	// namespace with `ip netns add` while pods run used to bind-mount
	// /run/netns over itself, hiding the pods' namespace mounts from Down
	// (CI: "mount left: /run/netns/cni-..."). Up makes the directory a
	// mount point first; Down must still leave nothing behind.
	t.Run("IPNetnsAddWhilePodsRunHidesNoNamespaceFromDown", func(t *testing.T) {
		// Only under KNOTLESS_TEST_CLUSTER_REQUIRED=1 (lifecycleConfig),
		// where up has installed iproute2 (Packages): no skip.
		if _, err := exec.LookPath("ip"); err != nil {
			t.Fatalf("no ip command, though the cluster's packages include iproute2: %v", err)
		}
		if out, err := exec.Command("ip", "netns", "add", "knotless-lifecycle-probe").CombinedOutput(); err != nil {
			t.Fatalf("ip netns add: %v: %s", err, out)
		}
		if out, err := exec.Command("ip", "netns", "del", "knotless-lifecycle-probe").CombinedOutput(); err != nil {
			t.Fatalf("ip netns del: %v: %s", err, out)
		}
	})

	t.Run("DownLeavesNothingBehind", func(t *testing.T) {
		if err := c.Down(ctx, false); err != nil {
			t.Fatal(err)
		}
		for name, pid := range pids(c) {
			if pid != 0 {
				t.Errorf("%s still running as pid %d", name, pid)
			}
		}
		if n := len(c.shimPIDs()); n > 0 {
			t.Errorf("%d containerd shims left", n)
		}
		if n := len(podPIDs()); n > 0 {
			t.Errorf("%d pod processes left", n)
		}
		mounts, _ := os.ReadFile("/proc/self/mountinfo")
		for _, line := range strings.Split(string(mounts), "\n") {
			if f := strings.Fields(line); len(f) > 4 && (strings.HasPrefix(f[4], c.StateDir+"/") || isCNINetns(f[4])) {
				t.Errorf("mount left: %s", f[4])
			}
		}
		if fileExists("/sys/class/net/" + BridgeName) {
			t.Errorf("bridge %s left", BridgeName)
		}
		for _, save := range []string{"iptables-save", "ip6tables-save"} {
			if out, _ := exec.Command(save).Output(); strings.Contains(string(out), harnessChain) || strings.Contains(string(out), "KUBE-") {
				t.Errorf("%s shows rules left:\n%s", save, out)
			}
		}
		if out, _ := exec.Command("nft", "list", "tables").Output(); strings.Contains(string(out), "kube-network-policies") {
			t.Errorf("nftables table left: %s", out)
		}
	})

	t.Run("UpAfterDown", func(t *testing.T) {
		if err := c.Up(ctx); err != nil {
			t.Fatal(err)
		}
		runPod(ctx, t, c, "after-down")
	})
}

// runPod runs a job-base pod to completion through kubectl and checks its
// output, proving scheduling, the kubelet, containerd and images work.
func runPod(ctx context.Context, t *testing.T, c Config, name string) {
	t.Helper()
	out, err := c.kubectl(ctx, "run", name, "--image="+JobBaseImage, "--image-pull-policy=Never", "--restart=Never", "--", "sh", "-c", "echo hello from "+name)
	if err != nil {
		t.Fatalf("create pod: %v\n%s", err, out)
	}
	defer c.kubectl(context.WithoutCancel(ctx), "delete", "pod", name, "--wait=false") //nolint:errcheck
	if err := poll(ctx, "pod "+name+" Succeeded", 90*time.Second, 250*time.Millisecond, func() (bool, string, error) {
		phase, err := c.kubectl(ctx, "get", "pod", name, "-o", "jsonpath={.status.phase}")
		return phase == "Succeeded", phase + " " + errString(err), nil
	}); err != nil {
		desc, _ := c.kubectl(ctx, "describe", "pod", name)
		t.Fatalf("%v\n%s", err, desc)
	}
	logs, err := c.kubectl(ctx, "logs", name)
	if err != nil || strings.TrimSpace(logs) != "hello from "+name {
		t.Fatalf("logs of %s = %q, %v", name, logs, err)
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
