package kube_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"knotless.dev/knotless/internal/agent"
	"knotless.dev/knotless/internal/executor"
	"knotless.dev/knotless/internal/executor/kube"
	"knotless.dev/knotless/internal/syncbuf"
	"knotless.dev/knotless/test/kubetest"
)

// Tests of job pods in user namespaces (issue 34): the local cluster's
// containerd 2 and runc give them; its gVisor RuntimeClass refuses them.

// uidMapOf runs `cat /proc/self/uid_map; id -u` as a step and returns the
// map and the uid the step has.
func uidMapOf(t *testing.T, s executor.Session) (string, int) {
	t.Helper()
	res, out, err := runStep(t, s, "uidmap", "cat /proc/self/uid_map; id -u", time.Minute)
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("cat /proc/self/uid_map: %+v %v %s", res, err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	uid, err := strconv.Atoi(strings.TrimSpace(lines[len(lines)-1]))
	if err != nil {
		t.Fatalf("id -u: %q", out)
	}
	return strings.Join(lines[:len(lines)-1], "\n"), uid
}

// hostPID finds, on this machine (the local cluster's only node), the
// process whose command line is argv (arguments joined by spaces) and
// returns its /proc directory, or "".
func hostPID(argv string) string {
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		if cmd, err := os.ReadFile(d + "/cmdline"); err == nil && strings.TrimRight(strings.ReplaceAll(string(cmd), "\x00", " "), " ") == argv {
			return d
		}
	}
	return ""
}

// hostUIDOf is the real uid, as the node sees it (/proc/PID/status), of
// the process hostPID finds, or -1.
func hostUIDOf(argv string) int {
	d := hostPID(argv)
	if d == "" {
		return -1
	}
	status, err := os.ReadFile(d + "/status")
	if err != nil {
		return -1
	}
	for line := range strings.Lines(string(status)) {
		if f := strings.Fields(line); len(f) > 1 && f[0] == "Uid:" {
			uid, _ := strconv.Atoi(f[1])
			return uid
		}
	}
	return -1
}

// TestKube_JobPodUIDsAreRemapped pins the default, --user-namespace auto,
// on the local cluster's runc: the pod as stored asks for a user
// namespace (hostUsers false) and stays hardened; the step's uid 1000 is
// an unprivileged uid of the node (read from the node's own /proc, not
// from inside), outside the 0-65535 range any pod without a user
// namespace has; the setup log says which range it got; a warm pod's
// claim says so too.
func TestKube_JobPodUIDsAreRemapped(t *testing.T) {
	f := newFixture(t)
	if f.runtimeClass != "" {
		t.Skipf("RuntimeClass %s makes no user namespaces (TestKube_UserNamespaceRefusedByTheRuntimeIsDroppedUnderAutoAndAnErrorUnderRequired covers it)", f.runtimeClass)
	}
	e := f.executor(t, f.config())
	id := runID("userns")
	spec := f.spec(t, id)
	log := &lockedLog{}
	spec.Log = log
	s := f.prepare(t, e, spec)
	pod := f.storedPod(t, podOf(t, s))
	if pod.Spec.HostUsers == nil || *pod.Spec.HostUsers {
		t.Fatalf("stored pod hostUsers %v, want false", pod.Spec.HostUsers)
	}
	assertHardened(t, pod, kubetest.UID, kubetest.UID, 10*time.Minute, id)
	uidMap, uid := uidMapOf(t, s)
	if !agent.UIDMapRemapped(uidMap) || uid != kubetest.UID {
		t.Fatalf("step: uid_map %q, uid %d; want a map of the pod's own and uid %d", uidMap, uid, kubetest.UID)
	}
	ranges, _ := agent.ParseUIDMap(uidMap)
	if want := "user namespace: " + agent.DescribeUIDMap(uidMap) + " on node "; !strings.Contains(log.String(), want) {
		t.Errorf("setup log lacks %q:\n%s", want, log.String())
	}
	if !strings.Contains(log.String(), "at most 1024 processes") {
		t.Errorf("setup log does not give the process limit:\n%s", log.String())
	}
	// The node's view: a step's process, found by its command line.
	marker := fmt.Sprintf("sleep 8.%d", time.Now().UnixNano()%1e6)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out syncbuf.Buffer
	done := startStep(ctx, s, executor.Step{ID: "sleep", Name: "sleep", Script: "exec " + marker}, &out)
	hostUID := -1
	for deadline := time.Now().Add(30 * time.Second); hostUID < 0 && time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		hostUID = hostUIDOf(marker)
	}
	if want := int(ranges[0].Outside) + kubetest.UID; hostUID != want {
		t.Errorf("the step's process on the node has uid %d, want %d (the pod's range from %d, plus %d)", hostUID, want, ranges[0].Outside, kubetest.UID)
	}
	if hostUID >= 0 && hostUID < 65536 {
		t.Errorf("the step's process on the node has uid %d: one of the node's own users", hostUID)
	}
	<-done

	t.Run("warm pod", func(t *testing.T) {
		e := f.warmExecutor(t, 1)
		warm := f.waitWarm(t, e, nil)
		if warm.Spec.HostUsers == nil || *warm.Spec.HostUsers {
			t.Fatalf("warm pod hostUsers %v, want false", warm.Spec.HostUsers)
		}
		spec := f.spec(t, runID("userns-warm"))
		log := &lockedLog{}
		spec.Log = log
		s := f.prepare(t, e, spec)
		if !strings.Contains(log.String(), "took the warm pod") || !strings.Contains(log.String(), "user namespace: uids 0-65535 -> host ") {
			t.Errorf("setup log of a warm pod's claim:\n%s", log.String())
		}
		if m, _ := uidMapOf(t, s); !agent.UIDMapRemapped(m) {
			t.Errorf("warm pod's uid_map %q", m)
		}
	})
}

// TestKube_UserNamespaceRefusedByTheRuntimeIsDroppedUnderAutoAndAnErrorUnderRequired
// pins the three modes on a node whose runtime cannot make a pod's user
// namespace (the local cluster's gVisor: runsc fails the sandbox): auto
// makes the pod again without one, saying so in the setup log, and asks
// for none again for that RuntimeClass; required ends the run errored
// before any step, naming the node and the runtime's words; off never
// asks.
func TestKube_UserNamespaceRefusedByTheRuntimeIsDroppedUnderAutoAndAnErrorUnderRequired(t *testing.T) {
	f := newFixture(t)
	runIn := func(t *testing.T, mode string) (executor.Session, *lockedLog, error, *kube.Executor) {
		cfg := f.config()
		cfg.RuntimeClass, cfg.UserNamespace = "gvisor", mode
		e := f.executor(t, cfg)
		spec := f.spec(t, runID("userns-"+mode))
		log := &lockedLog{}
		spec.Log = log
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		s, err := e.Prepare(ctx, spec)
		if err == nil {
			t.Cleanup(func() { _ = s.Cleanup(context.Background()) })
		}
		return s, log, err, e
	}
	t.Run("auto", func(t *testing.T) {
		s, log, err, e := runIn(t, kube.UserNamespaceAuto)
		if err != nil {
			t.Fatalf("prepare: %v\n%s", err, log)
		}
		if pod := f.storedPod(t, podOf(t, s)); pod.Spec.HostUsers != nil {
			t.Errorf("the pod made again has hostUsers %v, want unset", *pod.Spec.HostUsers)
		}
		for _, want := range []string{"user namespace: refused: node ", "namespace of type user", "made again without one", "user namespace: none ("} {
			if !strings.Contains(log.String(), want) {
				t.Errorf("setup log lacks %q:\n%s", want, log)
			}
		}
		if res, out, err := runStep(t, s, "1", "id -u", time.Minute); err != nil || res.ExitCode != 0 || strings.TrimSpace(string(out)) != fmt.Sprint(kubetest.UID) {
			t.Errorf("step: %+v %v %q", res, err, out)
		}
		if fact := e.Facts()["user namespace"]; !strings.Contains(fact, "none for RuntimeClass gvisor") {
			t.Errorf("fact %q does not say gvisor pods get none", fact)
		}
		// The next pod asks for none: no second refusal.
		spec := f.spec(t, runID("userns-auto2"))
		log2 := &lockedLog{}
		spec.Log = log2
		s2 := f.prepare(t, e, spec)
		if pod := f.storedPod(t, podOf(t, s2)); pod.Spec.HostUsers != nil || strings.Contains(log2.String(), "made again") {
			t.Errorf("second pod: hostUsers %v, log:\n%s", pod.Spec.HostUsers, log2)
		}
	})
	t.Run("required", func(t *testing.T) {
		_, log, err, _ := runIn(t, kube.UserNamespaceRequired)
		var f *executor.Fault
		if !errors.As(err, &f) || f.Reason != "executor" || !strings.Contains(f.Message, "node ") || !strings.Contains(f.Message, "cannot give the job pod a user namespace") {
			t.Fatalf("prepare: %v; want an executor fault naming the node\n%s", err, log)
		}
		if strings.Contains(log.String(), "step agent") {
			t.Errorf("the agent was delivered to a pod that is refused:\n%s", log)
		}
	})
	t.Run("off", func(t *testing.T) {
		s, log, err, _ := runIn(t, kube.UserNamespaceOff)
		if err != nil {
			t.Fatalf("prepare: %v\n%s", err, log)
		}
		if pod := f.storedPod(t, podOf(t, s)); pod.Spec.HostUsers != nil {
			t.Errorf("hostUsers %v under off", *pod.Spec.HostUsers)
		}
		if !strings.Contains(log.String(), "user namespace: none (--user-namespace off)") || strings.Contains(log.String(), "refused") {
			t.Errorf("setup log:\n%s", log)
		}
	})
}

// TestKube_RunAsImageRootOnlyInAUserNamespace pins --run-as image with an
// image whose user is root (most published images): in a pod with a user
// namespace it runs as the pod's own root (uid 0 inside, an unprivileged
// uid on the node) and may write as root; without one (off) the kubelet's
// runAsNonRoot check refuses it before anything runs.
func TestKube_RunAsImageRootOnlyInAUserNamespace(t *testing.T) {
	f := newFixture(t)
	if f.runtimeClass != "" {
		t.Skipf("RuntimeClass %s makes no user namespaces: TestKube_EachRunAsVariantIsApplied covers the refusal", f.runtimeClass)
	}
	run := func(t *testing.T, mode string) (executor.Session, error) {
		cfg := f.config()
		cfg.RunAs, cfg.UserNamespace = kube.RunAs{Image: true}, mode
		e := f.executor(t, cfg)
		spec := f.spec(t, runID("root-"+mode))
		spec.Image = kubetest.JobRootImage
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		s, err := e.Prepare(ctx, spec)
		if err == nil {
			t.Cleanup(func() { _ = s.Cleanup(context.Background()) })
		}
		return s, err
	}
	t.Run("auto", func(t *testing.T) {
		s, err := run(t, kube.UserNamespaceAuto)
		if err != nil {
			t.Fatal(err)
		}
		pod := f.storedPod(t, podOf(t, s))
		if pod.Spec.SecurityContext.RunAsNonRoot != nil || pod.Spec.HostUsers == nil || *pod.Spec.HostUsers {
			t.Errorf("pod: runAsNonRoot %v, hostUsers %v; want unset and false", pod.Spec.SecurityContext.RunAsNonRoot, pod.Spec.HostUsers)
		}
		uidMap, uid := uidMapOf(t, s)
		if uid != 0 || !agent.UIDMapRemapped(uidMap) {
			t.Fatalf("uid %d with uid_map %q; want the pod's own root", uid, uidMap)
		}
		if res, out, err := runStep(t, s, "2", "touch /tmp/root-file && stat -c %u /tmp/root-file", time.Minute); err != nil || res.ExitCode != 0 || strings.TrimSpace(string(out)) != "0" {
			t.Errorf("root writes its temporary directory: %+v %v %q", res, err, out)
		}
	})
	t.Run("off", func(t *testing.T) {
		_, err := run(t, kube.UserNamespaceOff)
		var fault *executor.Fault
		if !errors.As(err, &fault) || !strings.Contains(fault.Message, "CreateContainerConfigError") {
			t.Fatalf("Prepare: %v; want an executor.Fault naming CreateContainerConfigError", err)
		}
	})
}

// TestKube_ForkBombStopsAtPidsAndSparesOtherPods pins --pids on kube: a
// fork bomb (a loop that starts processes which stay) in a pod with
// --pids 64 never has more than 64 processes and threads of its user
// (the agent's and its bridge's threads among them), counted from outside
// by an exec the limit does not bind (its own shell and tools add a few);
// meanwhile another run's pod on the same node starts 200 processes, and
// the node stays Ready.
func TestKube_ForkBombStopsAtPidsAndSparesOtherPods(t *testing.T) {
	f := newFixture(t)
	if f.runtimeClass != "" {
		t.Skipf("RuntimeClass %s makes no user namespaces, where --pids holds", f.runtimeClass)
	}
	const pids = 64
	cfg := f.config()
	cfg.Pids = pids
	bomber := f.executor(t, cfg)
	other := f.executor(t, f.config())
	bs := f.prepare(t, bomber, f.spec(t, runID("bomb")))
	spared := f.prepare(t, other, f.spec(t, runID("spared")))
	bombPod := podOf(t, bs)

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var bombOut syncbuf.Buffer
	bombDone := startStep(ctx, bs, executor.Step{ID: "bomb", Name: "bomb",
		Script: `(while :; do sleep 600 & done) 2>/dev/null & exec sleep 25`}, &bombOut)
	time.Sleep(3 * time.Second)
	var manyOut syncbuf.Buffer
	manyDone := startStep(ctx, spared, executor.Step{ID: "many", Name: "many",
		Script: `i=0; while [ $i -lt 200 ]; do sleep 5 & i=$((i+1)); done; echo started $i; wait; echo spared`}, &manyOut)
	maxTasks := 0
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(500 * time.Millisecond) {
		out, err := f.podExec(ctx, bombPod, `n=0; for d in /proc/[0-9]*/task; do set -- $d/*; [ -e "$1" ] && n=$((n + $#)); done; echo $n`)
		if err != nil {
			t.Logf("count: %v", err)
			continue
		}
		if n, err := strconv.Atoi(strings.TrimSpace(string(out))); err == nil && n > maxTasks {
			maxTasks = n
		}
	}
	res, err := await(t, manyDone, time.Minute)
	if err != nil || res.ExitCode != 0 || !strings.Contains(string(manyOut.Bytes()), "started 200") || !strings.Contains(string(manyOut.Bytes()), "spared") {
		t.Errorf("the other pod could not start 200 processes beside the bomb: %+v %v %s", res, err, manyOut.Bytes())
	}
	// Above the limit only by the counting exec's few; well above half of
	// it, or the bomb never ran (58 of 64 where it was first measured: a
	// few of the user's tasks are not in the pod's /proc).
	if maxTasks > pids+8 || maxTasks < pids/2 {
		t.Errorf("the bomb's pod peaked at %d tasks, want about the limit %d", maxTasks, pids)
	}
	if res, err := await(t, bombDone, time.Minute); err != nil || res.ExitCode != 0 {
		t.Errorf("the bomb's step: %+v %v %s", res, err, bombOut.Bytes())
	}
	node, err := f.c.Client.CoreV1().Nodes().Get(ctx, f.storedPod(t, bombPod).Spec.NodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range node.Status.Conditions {
		if c.Type == corev1.NodeReady && c.Status != corev1.ConditionTrue {
			t.Errorf("node %s is not Ready after the bomb: %s", node.Name, c.Message)
		}
	}
	t.Logf("the bomb's pod peaked at %d tasks under --pids %d", maxTasks, pids)
}
