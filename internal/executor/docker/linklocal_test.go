package docker_test

import (
	"fmt"
	"net"
	"os/exec"
	"strings"
	"testing"
	"time"

	"knotless.dev/knotless/internal/executor"
	"knotless.dev/knotless/internal/executor/docker"
	"knotless.dev/knotless/internal/testenv"
)

// ipRun runs ip(8) and fails the test with its output.
func ipRun(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
	}
}

// TestDocker_LinkLocalAddressUnreachableFromTheDefaultNetwork: a service
// on a link-local address the host routes to (as a cloud's metadata
// service at 169.254.169.254) is reached from the runner's network only
// while the executor's DOCKER-USER rule is missing: the test stands one
// up in a network namespace of its own behind a veth pair, proves the
// path works without the rule, and that the rule closes it.
func TestDocker_LinkLocalAddressUnreachableFromTheDefaultNetwork(t *testing.T) {
	f := newFixture(t)
	tag := fmt.Sprintf("%d", time.Now().UnixNano()%1e6)
	ns, hostIf, nsIf := "knll"+tag, "kllh"+tag, "klln"+tag
	if out, err := exec.Command("ip", "netns", "add", ns).CombinedOutput(); err != nil {
		testenv.Skipf(t, "cannot make a network namespace (not root?): %v %s", err, out)
	}
	t.Cleanup(func() {
		_ = exec.Command("ip", "link", "del", hostIf).Run()
		_ = exec.Command("ip", "netns", "del", ns).Run()
	})
	ipRun(t, "link", "add", hostIf, "type", "veth", "peer", "name", nsIf)
	ipRun(t, "link", "set", nsIf, "netns", ns)
	ipRun(t, "addr", "add", "169.254.77.2/24", "dev", hostIf)
	ipRun(t, "link", "set", hostIf, "up")
	ipRun(t, "-n", ns, "addr", "add", "169.254.77.1/24", "dev", nsIf)
	ipRun(t, "-n", ns, "link", "set", nsIf, "up")
	ipRun(t, "-n", ns, "link", "set", "lo", "up")
	srv := exec.Command("ip", "netns", "exec", ns, "/bin/busybox", "sh", "-c", "while true; do /bin/busybox nc -l -p 8080 </dev/null >/dev/null 2>&1; done")
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Process.Kill(); _ = srv.Wait() })
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", "169.254.77.1:8080", time.Second)
		if err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the link-local service does not answer from the host: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}

	e := f.executor(t, f.config())
	spec, _ := f.spec(t, runID("linklocal"))
	s := f.prepare(t, e, spec)
	probe := func(id string) string {
		t.Helper()
		res, out, err := runStep(t, s, executor.Step{ID: id, Shell: []string{"/bin/sh"}, Script: "if nc -w 3 169.254.77.1 8080 </dev/null 2>/dev/null; then echo reached; else echo blocked; fi\n"}, time.Minute)
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("probe: %+v, %v, %q", res, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	if got := probe("1"); got != "blocked" {
		t.Fatalf("with the executor's rules the link-local service was %s", got)
	}
	rule := docker.HostRules(f.runner)[1]
	if out, err := exec.Command("iptables", append([]string{"-w", "-D"}, rule...)...).CombinedOutput(); err != nil {
		t.Fatalf("remove the rule: %v %s", err, out)
	}
	got := probe("2")
	if out, err := exec.Command("iptables", append([]string{"-w", "-I"}, rule...)...).CombinedOutput(); err != nil {
		t.Fatalf("restore the rule: %v %s", err, out)
	}
	if got != "reached" {
		t.Fatalf("without the rule the service was %s: the test's path does not work, so it proves nothing", got)
	}
	if got := probe("3"); got != "blocked" {
		t.Fatalf("with the rule back the service was %s", got)
	}
}
