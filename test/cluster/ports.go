package cluster

import (
	"context"
	"fmt"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
)

// clusterPorts are the TCP ports two clusters on one machine would both
// want: kube-apiserver, etcd client and peer, and the kubelet.
var clusterPorts = []int{APIPort, 2379, 2380, 10250}

var ssPID = regexp.MustCompile(`pid=(\d+)`)

// foreignListener returns a description of the first process, not one of
// this state directory's, that listens on a clusterPorts port ("" if none):
// another cluster (another state directory, or a Kubernetes not started by
// this harness) owns the machine's Kubernetes ports, pods and netfilter
// rules, and Up and Down must leave them alone. It reads `ss -ltnp`.
func (c Config) foreignListener(ctx context.Context) string {
	ours := map[int]bool{}
	for _, p := range c.processes() {
		if pid := c.running(p); pid != 0 {
			ours[pid] = true
		}
	}
	out, err := run(ctx, "ss", "-Hltnp")
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) < 6 {
			continue
		}
		local := f[3]
		port, err := strconv.Atoi(local[strings.LastIndexByte(local, ':')+1:])
		if err != nil || !containsInt(clusterPorts, port) {
			continue
		}
		for _, m := range ssPID.FindAllStringSubmatch(line, -1) {
			pid, _ := strconv.Atoi(m[1])
			if ours[pid] {
				continue
			}
			exe := argv0(pid)
			hint := ""
			if filepath.Base(filepath.Dir(exe)) == "bin" {
				hint = fmt.Sprintf("; if it is another test cluster, stop it with: knotless-test-cluster --state %s down", filepath.Dir(filepath.Dir(exe)))
			}
			return fmt.Sprintf("port %d is held by pid %d (%s), which this state directory (%s) did not start%s", port, pid, exe, c.StateDir, hint)
		}
	}
	return ""
}

func containsInt(s []int, v int) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}
