package docker_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/network"
	"golang.org/x/sys/unix"

	"knotless.dev/knotless/internal/executor"
	"knotless.dev/knotless/internal/executor/docker"
	"knotless.dev/knotless/internal/syncbuf"
	"knotless.dev/knotless/test/dockertest"
)

// secretValue is a secret with bytes that break naive quoting and
// encodings: quotes, $, =, a newline, non-UTF-8 bytes.
func secretValue(t *testing.T) string {
	return fmt.Sprintf("s3cr%d'\"$HOME=x\n\xff\xfe-end", time.Now().UnixNano())
}

// rawInspect is the engine's own JSON of a container or an exec, as
// `docker inspect` prints it.
func (f *fixture) rawInspect(t *testing.T, ctx context.Context, id string) []byte {
	t.Helper()
	_, raw, err := f.eng.Client.ContainerInspectWithRaw(ctx, id, false)
	if err != nil {
		t.Fatalf("inspect %s: %v", id, err)
	}
	return raw
}

func (f *fixture) rawExec(t *testing.T, ctx context.Context, execID string) []byte {
	t.Helper()
	resp, err := f.eng.Client.HTTPClient().Get("http://docker/exec/" + execID + "/json")
	if err != nil {
		t.Fatalf("inspect exec %s: %v", execID, err)
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	_, _ = b.ReadFrom(resp.Body)
	return b.Bytes()
}

// TestDocker_SecretByteExactAndAbsentFromInspectLabelsAndLogs: a step
// gets a secret byte for byte, and it is in no container config (docker
// inspect), no exec config (the inspect of every exec the container had
// while the step ran, and after), no label, no container log and no line
// of the executor's own log.
func TestDocker_SecretByteExactAndAbsentFromInspectLabelsAndLogs(t *testing.T) {
	f := newFixture(t)
	var logs syncbuf.Buffer
	cfg := f.config()
	cfg.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	e := f.executor(t, cfg)
	spec, setup := f.spec(t, runID("secret"))
	s := f.prepare(t, e, spec)
	id := containerOf(t, s)
	secret := secretValue(t)

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out syncbuf.Buffer
	done := make(chan error, 1)
	var res executor.Result
	go func() {
		var err error
		res, err = s.Exec(ctx, executor.Step{ID: "1", Name: "secret",
			Script:  "printf %s \"$TOKEN\" | od -An -c | tr -d ' \\n'; echo; printf %s \"$TOKEN\" > /tmp/got; sleep 3\n",
			Secrets: map[string]string{"TOKEN": secret}}, &out)
		done <- err
	}()
	// While the step runs: the container and every exec it has.
	var execIDs []string
	deadline := time.Now().Add(time.Minute)
	for len(execIDs) == 0 || !bytes.Contains(out.Bytes(), []byte("\n")) {
		st, err := f.eng.Client.ContainerInspect(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		execIDs = st.ExecIDs
		if time.Now().After(deadline) {
			t.Fatalf("the step did not start within a minute (output %q)", out.Bytes())
		}
		time.Sleep(50 * time.Millisecond)
	}
	check := func(what string, b []byte) {
		t.Helper()
		for _, needle := range [][]byte{[]byte(secret), []byte(strings.Split(secret, "'")[0])} {
			if bytes.Contains(b, needle) {
				t.Errorf("the secret is in %s", what)
			}
		}
	}
	check("docker inspect of the container", f.rawInspect(t, ctx, id))
	for _, x := range execIDs {
		check("docker inspect of exec "+x, f.rawExec(t, ctx, x))
	}
	got, _, _, err := f.eng.Exec(ctx, id, "0:0", []string{"cat", "/tmp/got"}, nil)
	if err != nil || string(got) != secret {
		t.Errorf("the step's secret %q (err %v), want %q byte for byte", got, err, secret)
	}
	if err := <-done; err != nil || res.ExitCode != 0 {
		t.Fatalf("step: %+v, %v", res, err)
	}
	st, _ := f.eng.Client.ContainerInspect(ctx, id)
	for _, x := range st.ExecIDs {
		check("docker inspect of exec "+x+" (after the step)", f.rawExec(t, ctx, x))
	}
	lbl, _ := json.Marshal(st.Config.Labels)
	check("the container's labels", lbl)
	rc, err := f.eng.Client.ContainerLogs(ctx, id, containerLogsAll)
	if err != nil {
		t.Fatal(err)
	}
	var clog bytes.Buffer
	_, _ = clog.ReadFrom(rc)
	rc.Close()
	check("the container's log (docker logs)", clog.Bytes())
	check("the executor's log", []byte(logs.String()))
	// The engine's own log, when it is the tests' engine (scripts/dockerd.sh).
	if b, err := os.ReadFile("/run/knotless-dockerd/dockerd.log"); err == nil {
		check("the engine's log", b)
	}
	check("the run's setup log", []byte(setup.String()))
}

// TestDocker_ContainerIsHardened reads the container as the engine stores
// it and as a step sees it: numeric non-root user, read-only root file
// system, no capabilities, no-new-privileges, no docker socket or host
// path but the agent (read-only) and the checkout, not the host's
// network, memory-swap equal to memory, the process limit, and the agent
// as PID 1.
func TestDocker_ContainerIsHardened(t *testing.T) {
	f := newFixture(t)
	e := f.executor(t, f.config())
	spec, _ := f.spec(t, runID("hardened"))
	s := f.prepare(t, e, spec)
	id := containerOf(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st, err := f.eng.Client.ContainerInspect(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	hc := st.HostConfig
	switch {
	case st.Config.User != "1000:1000":
		t.Errorf("user %q", st.Config.User)
	case !hc.ReadonlyRootfs:
		t.Error("root file system writable")
	case len(hc.CapDrop) != 1 || hc.CapDrop[0] != "ALL" || len(hc.CapAdd) > 0:
		t.Errorf("capabilities: drop %v add %v", hc.CapDrop, hc.CapAdd)
	case !strings.Contains(strings.Join(hc.SecurityOpt, ","), "no-new-privileges"):
		t.Errorf("security options %v", hc.SecurityOpt)
	case hc.Privileged, hc.NetworkMode.IsHost(), hc.PidMode.IsHost(), hc.IpcMode.IsHost():
		t.Errorf("host namespaces or privileged: %+v", hc)
	case hc.Memory != 128<<20 || hc.MemorySwap != hc.Memory:
		t.Errorf("memory %d swap %d", hc.Memory, hc.MemorySwap)
	case hc.PidsLimit == nil || *hc.PidsLimit != 256:
		t.Errorf("pids limit %v", hc.PidsLimit)
	case len(st.Config.Env) > 0 && strings.Contains(strings.Join(st.Config.Env, ","), "KNOTLESS"):
		t.Errorf("env %v", st.Config.Env)
	}
	for _, m := range st.Mounts {
		if strings.Contains(m.Source, "docker.sock") || m.Destination == "/var/run/docker.sock" {
			t.Errorf("the docker socket is mounted: %+v", m)
		}
		if m.Type == "bind" && m.Destination != docker.AgentPath && m.Destination != docker.Workspace {
			t.Errorf("a host path is mounted: %+v", m)
		}
		if m.Destination == docker.AgentPath && m.RW {
			t.Errorf("the agent is mounted writable: %+v", m)
		}
	}
	script := "id -u; id -g; grep -E '^(CapEff|NoNewPrivs)' /proc/self/status | tr -s '\\t ' ' '; tr '\\0' ' ' < /proc/1/cmdline | cut -d' ' -f1-2; touch /x 2>/dev/null && echo rootfs-writable; touch /tmp/t /home/knotless/t /workspace/t && echo writable-dirs-ok\n"
	res, out, err := runStep(t, s, executor.Step{ID: "1", Shell: []string{"/bin/sh"}, Script: script}, time.Minute)
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("step: %+v, %v, %q", res, err, out)
	}
	want := "1000\n1000\nCapEff: 0000000000000000\nNoNewPrivs: 1\n" + docker.AgentPath + " serve\nwritable-dirs-ok\n"
	if string(out) != want {
		t.Errorf("in the container:\n%s\nwant:\n%s", out, want)
	}
}

// TestDocker_DefaultNetworkNeitherHostNorOtherContainers: from the
// runner's own network a step reaches neither a service of the runner's
// host (listening on every address) nor another run's container.
func TestDocker_DefaultNetworkNeitherHostNorOtherContainers(t *testing.T) {
	f := newFixture(t)
	l, err := net.Listen("tcp", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	port := l.Addr().(*net.TCPAddr).Port
	e := f.executor(t, f.config())
	specA, _ := f.spec(t, runID("neta"))
	specB, _ := f.spec(t, runID("netb"))
	a, b := f.prepare(t, e, specA), f.prepare(t, e, specB)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	nw, err := f.eng.Client.NetworkInspect(ctx, docker.NetworkName(f.runner), network.InspectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(nw.IPAM.Config) == 0 || nw.IPAM.Config[0].Gateway == "" {
		t.Fatalf("network %s has no gateway: %+v", nw.Name, nw.IPAM)
	}
	gw := nw.IPAM.Config[0].Gateway
	if nw.Options["com.docker.network.bridge.enable_icc"] != "false" {
		t.Errorf("inter-container communication not off: %v", nw.Options)
	}
	stB, err := f.eng.Client.ContainerInspect(ctx, containerOf(t, b))
	if err != nil {
		t.Fatal(err)
	}
	ipB := stB.NetworkSettings.Networks[nw.Name].IPAddress
	// B listens; A tries B, then the host's gateway address.
	go func() {
		_, _, _ = runStep(t, b, executor.Step{ID: "1", Script: "nc -l -p 8080 </dev/null >/dev/null; true\n", Timeout: 40 * time.Second}, time.Minute)
	}()
	probe := fmt.Sprintf("sleep 1; if nc -w 3 %s 8080 </dev/null 2>/dev/null; then echo reached-other-container; fi; if nc -w 3 %s %d </dev/null 2>/dev/null; then echo reached-host; fi; echo done\n", ipB, gw, port)
	res, out, err := runStep(t, a, executor.Step{ID: "1", Shell: []string{"/bin/sh"}, Script: probe}, time.Minute)
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("probe: %+v, %v, %q", res, err, out)
	}
	if string(out) != "done\n" {
		t.Errorf("from the job network: %q, want neither the other container nor the host reached", out)
	}
	// The rules that keep the host and link-local addresses (a cloud's
	// metadata service) out of reach are in place.
	for _, rule := range docker.HostRules(f.runner) {
		if out, err := exec.Command("iptables", append([]string{"-w", "-C"}, rule...)...).CombinedOutput(); err != nil {
			t.Errorf("iptables rule %v is missing: %v %s", rule, err, out)
		}
	}
	// The same probe from the host proves the listener answers.
	c, err := net.DialTimeout("tcp", fmt.Sprintf("%s:%d", gw, port), 3*time.Second)
	if err != nil {
		t.Fatalf("the host's own listener does not answer on %s: %v", gw, err)
	}
	c.Close()
}

// TestDocker_HardLinkedCheckoutFilesStayTheRunnersOwn: the checkout's git
// objects are hard links to the runner's mirror; giving the checkout to
// the job's user must not give it the mirror's files: a step can read such
// a file but not change it, and its owner outside stays root.
func TestDocker_HardLinkedCheckoutFilesStayTheRunnersOwn(t *testing.T) {
	f := newFixture(t)
	e := f.executor(t, f.config())
	spec, _ := f.spec(t, runID("hardlink"))
	mirror := filepath.Join(t.TempDir(), "object")
	if err := os.WriteFile(mirror, []byte("mirror object\n"), 0o444); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(mirror, filepath.Join(spec.Workspace, "object")); err != nil {
		t.Fatal(err)
	}
	s := f.prepare(t, e, spec)
	res, out, err := runStep(t, s, executor.Step{ID: "1", Shell: []string{"/bin/sh"}, Script: "cat object; chmod 666 object 2>/dev/null && echo chmod-worked; { echo x >> object; } 2>/dev/null && echo write-worked; echo new > mine && echo own-files-ok\n"}, time.Minute)
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("step: %+v, %v, %q", res, err, out)
	}
	if string(out) != "mirror object\nown-files-ok\n" {
		t.Errorf("in the container: %q, want the object readable, not changeable, and the checkout writable", out)
	}
	var st unix.Stat_t
	if err := unix.Stat(mirror, &st); err != nil || st.Uid != 0 {
		t.Errorf("the mirror's file is owned by %d now (err %v), want root", st.Uid, err)
	}
}

// TestDocker_RunAsImageTakesANumericNonRootUserAndRefusesRoot: with
// --run-as image the image's numeric USER is used; an image whose USER
// is root is refused before any container is made.
func TestDocker_RunAsImageTakesANumericNonRootUserAndRefusesRoot(t *testing.T) {
	f := newFixture(t)
	cfg := f.config()
	cfg.RunAs = docker.RunAs{Image: true}
	e := f.executor(t, cfg)
	spec, _ := f.spec(t, runID("asimage"))
	s := f.prepare(t, e, spec)
	res, out, err := runStep(t, s, executor.Step{ID: "1", Script: "id -u\n"}, time.Minute)
	if err != nil || res.ExitCode != 0 || string(out) != "1000\n" {
		t.Fatalf("step: %+v, %v, %q", res, err, out)
	}
	spec, _ = f.spec(t, runID("asroot"))
	spec.Image = dockertest.RootImage
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if s, err := e.Prepare(ctx, spec); err == nil {
		_ = s.Cleanup(ctx)
		t.Fatal("an image whose USER is root was run")
	} else if !strings.Contains(err.Error(), "must be numeric and not root") {
		t.Errorf("error %v", err)
	}
	if left := f.leftovers(t, spec.ID); len(left) > 0 {
		t.Errorf("left behind: %v", left)
	}
}
