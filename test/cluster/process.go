package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// process is one long-running program of the cluster.
type process struct {
	name string   // pid file and log file name
	path string   // argv[0]; how stop recognises it in /proc/PID/cmdline
	args []string // without argv[0]
	env  []string // added to a minimal environment
	// stopSignal asks it to stop (SIGTERM when zero). kube-network-policies
	// removes its nftables table only on SIGINT.
	stopSignal syscall.Signal
}

// processes returns the cluster's programs in start order (stop goes in
// reverse). Flags follow each component's reference documentation for
// v1.37.
func (c Config) processes() []process {
	pki := func(f string) string { return c.path("pki", f) }
	return []process{
		// containerd finds shims on its PATH: ours (runc's and runsc's)
		// in STATE/shims, first.
		{name: "containerd", path: c.bin("containerd"), args: []string{"--config", c.path("containerd", "config.toml")},
			env: []string{"PATH=" + c.shimDir() + ":" + processPath}},
		{name: "etcd", path: c.bin("etcd"), args: joinFlags(
			"--name=knotless-test",
			"--data-dir="+c.path("etcd"),
			"--listen-client-urls=http://127.0.0.1:2379",
			"--advertise-client-urls=http://127.0.0.1:2379",
			"--listen-peer-urls=http://127.0.0.1:2380",
			"--initial-advertise-peer-urls=http://127.0.0.1:2380",
			"--initial-cluster=knotless-test=http://127.0.0.1:2380",
			"--listen-metrics-urls=http://127.0.0.1:2381",
			"--unsafe-no-fsync", // a test cluster: losing the last writes on a power cut is fine
			"--log-level=warn",
		)},
		{name: "kube-apiserver", path: c.bin("kube-apiserver"), args: joinFlags(
			"--etcd-servers=http://127.0.0.1:2379",
			"--advertise-address="+c.NodeIP,
			fmt.Sprintf("--secure-port=%d", APIPort),
			"--tls-cert-file="+pki("apiserver.crt"),
			"--tls-private-key-file="+pki("apiserver.key"),
			"--client-ca-file="+pki("ca.crt"),
			"--authorization-mode=Node,RBAC",
			"--enable-admission-plugins=NodeRestriction",
			"--service-cluster-ip-range="+ServiceCIDR,
			"--service-account-issuer=https://kubernetes.default.svc."+ClusterDomain,
			"--service-account-key-file="+pki("sa.pub"),
			"--service-account-signing-key-file="+pki("sa.key"),
			"--kubelet-client-certificate="+pki("apiserver-kubelet-client.crt"),
			"--kubelet-client-key="+pki("apiserver-kubelet-client.key"),
			"--kubelet-preferred-address-types=InternalIP",
			"--requestheader-client-ca-file="+pki("ca.crt"),
			"--requestheader-allowed-names=front-proxy-client",
			"--requestheader-username-headers=X-Remote-User",
			"--requestheader-group-headers=X-Remote-Group",
			"--requestheader-extra-headers-prefix=X-Remote-Extra-",
			"--audit-policy-file="+c.path("audit-policy.yaml"),
			// Structured authentication (JWT issuers); the API server reloads
			// the file when it changes (tests add issuers: kubetest).
			"--authentication-config="+c.AuthenticationConfig(),
			"--audit-log-path="+c.AuditLog(),
			"--audit-log-format=json",
			"--audit-log-maxsize=200",
			"--audit-log-maxbackup=2",
			"--allow-privileged=true",
			"--profiling=false",
		)},
		{name: "kube-controller-manager", path: c.bin("kube-controller-manager"), args: append(joinFlags(
			"--bind-address=127.0.0.1",
			"--use-service-account-credentials",
			"--root-ca-file="+pki("ca.crt"),
			"--service-account-private-key-file="+pki("sa.key"),
			"--cluster-signing-cert-file="+pki("ca.crt"),
			"--cluster-signing-key-file="+pki("ca.key"),
			"--allocate-node-cidrs",
			"--cluster-cidr="+PodCIDR,
			"--service-cluster-ip-range="+ServiceCIDR,
			"--leader-elect=false",
			"--profiling=false",
		), c.componentKubeconfigs("controller-manager")...)},
		{name: "kube-scheduler", path: c.bin("kube-scheduler"), args: append(joinFlags(
			"--bind-address=127.0.0.1",
			"--leader-elect=false",
			"--profiling=false",
		), c.componentKubeconfigs("scheduler")...)},
		{name: "kubelet", path: c.bin("kubelet"), args: joinFlags(
			"--config="+c.path("kubelet", "config.yaml"),
			"--kubeconfig="+c.path("kubelet.kubeconfig"),
			"--root-dir="+c.path("kubelet", "root"),
			"--cert-dir="+c.path("kubelet", "pki"),
			"--hostname-override="+c.NodeName,
			"--node-ip="+c.NodeIP,
		)},
		{name: "kube-proxy", path: c.bin("kube-proxy"), args: []string{"--config=" + c.path("kube-proxy", "config.yaml")}},
		{name: "kube-network-policies", path: c.bin("kube-network-policies"), args: joinFlags(
			"--hostname-override="+c.NodeName,
			"--disable-nri",
			"--metrics-bind-address=127.0.0.1:9080",
		), env: []string{"KUBECONFIG=" + c.path("network-policies.kubeconfig")}, stopSignal: syscall.SIGINT},
	}
}

// componentKubeconfigs are the three kubeconfig flags of the
// controller-manager and the scheduler, all naming NAME.kubeconfig: the
// client for its work, and for delegated authentication and authorization.
func (c Config) componentKubeconfigs(name string) []string {
	kc := c.path(name + ".kubeconfig")
	return []string{"--kubeconfig=" + kc, "--authentication-kubeconfig=" + kc, "--authorization-kubeconfig=" + kc}
}

// processPath is the PATH every process starts with.
const processPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

func (c Config) pidFile(name string) string { return c.path("pids", name+".pid") }
func (c Config) logFile(name string) string { return c.path("logs", name+".log") }

// start runs p detached (own session, stdin /dev/null, stdout and stderr
// appended to logs/NAME.log) and records its pid in pids/NAME.pid. The
// process outlives the harness; stop ends it.
func (c Config) start(p process) error {
	if err := os.MkdirAll(c.path("logs"), 0o755); err != nil {
		return err
	}
	if err := os.MkdirAll(c.path("pids"), 0o755); err != nil {
		return err
	}
	// Keep the previous run's log as NAME.log.1: a start's error messages
	// then show only this run's lines.
	_ = os.Rename(c.logFile(p.name), c.logFile(p.name)+".1")
	log, err := os.OpenFile(c.logFile(p.name), os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	defer log.Close()
	fmt.Fprintf(log, "\n==== %s started by the knotless test-cluster harness: %s %s\n", time.Now().UTC().Format(time.RFC3339), p.path, strings.Join(p.args, " "))
	cmd := exec.Command(p.path, p.args...)
	// A variable of p.env replaces the default (the last of duplicates wins).
	cmd.Env = append([]string{"PATH=" + processPath, "HOME=/root"}, p.env...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.Dir = c.StateDir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", p.name, err)
	}
	pid := cmd.Process.Pid
	// Reap it if it dies while we still run, so alive() sees it gone; after
	// we exit, init reaps it.
	go cmd.Wait() //nolint:errcheck
	c.Log.Info("started", "process", p.name, "pid", pid, "log", c.logFile(p.name))
	return writeFile(c.pidFile(p.name), []byte(strconv.Itoa(pid)+"\n"), 0o644)
}

// running returns the pid recorded for p if that process is alive and is
// still p (its argv[0] matches), 0 otherwise. A stale pid file (process
// gone, or pid reused by another program) reads as not running.
func (c Config) running(p process) int {
	b, err := os.ReadFile(c.pidFile(p.name))
	if err != nil {
		return 0
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return 0
	}
	if argv0(pid) != p.path {
		return 0
	}
	return pid
}

// argv0 is /proc/PID/cmdline's first element, "" if the process is gone or a
// zombie.
func argv0(pid int) string {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cmdline"))
	if err != nil || len(b) == 0 {
		return ""
	}
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	return string(b)
}

// stop ends p if it runs: its stop signal, then SIGKILL after grace. It removes the
// pid file. Only the recorded pid is signalled, never a name match.
func (c Config) stop(p process, grace time.Duration) {
	defer os.Remove(c.pidFile(p.name))
	pid := c.running(p)
	if pid == 0 {
		return
	}
	c.Log.Info("stopping", "process", p.name, "pid", pid)
	sig := p.stopSignal
	if sig == 0 {
		sig = syscall.SIGTERM
	}
	if !killAndWait(pid, sig, grace) {
		c.Log.Warn("did not stop; killed", "process", p.name, "pid", pid, "grace", grace)
	}
}

// killAndWait sends sig to pid and waits up to grace for it to exit; it
// reports whether it did. If not, it SIGKILLs it and waits up to 5 s more.
func killAndWait(pid int, sig syscall.Signal, grace time.Duration) (stopped bool) {
	_ = syscall.Kill(pid, sig)
	if waitGone(pid, grace) {
		return true
	}
	_ = syscall.Kill(pid, syscall.SIGKILL)
	waitGone(pid, 5*time.Second)
	return false
}

// waitGone polls until pid no longer exists (or is a zombie) or d passes.
func waitGone(pid int, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for {
		if !alive(pid) {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func alive(pid int) bool {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return false
	}
	// state is the field after the ")" closing the command name.
	if i := bytes.LastIndexByte(b, ')'); i >= 0 && i+2 < len(b) {
		return b[i+2] != 'Z' && b[i+2] != 'X'
	}
	return true
}

// run executes a short command and returns its combined output; the error
// names the command and includes the output.
func run(ctx context.Context, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

// poll calls f every interval until it returns true or a non-nil error, or
// until timeout passes; the timeout error says what was awaited and the last
// reason f gave.
func poll(ctx context.Context, what string, timeout, interval time.Duration, f func() (bool, string, error)) error {
	deadline := time.Now().Add(timeout)
	var last string
	for {
		ok, reason, err := f()
		if err != nil {
			return fmt.Errorf("waiting for %s: %w", what, err)
		}
		if ok {
			return nil
		}
		last = reason
		if time.Now().After(deadline) {
			return fmt.Errorf("timed out after %s waiting for %s (last: %s)", timeout, what, last)
		}
		select {
		case <-ctx.Done():
			return errors.Join(fmt.Errorf("waiting for %s", what), ctx.Err())
		case <-time.After(interval):
		}
	}
}
