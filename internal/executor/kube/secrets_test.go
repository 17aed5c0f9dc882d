package kube_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"knotless.dev/knotless/internal/executor"
	"knotless.dev/knotless/internal/executor/agentenv"
	"knotless.dev/knotless/internal/syncbuf"
	"knotless.dev/knotless/test/kubetest"
)

// TestKube_SecretReachesTheStepByteExactAndNowhereElse pins promise 1
// (docs/architecture.md, "Promises no part may break") on Kubernetes: a secret value with newlines, quotes, $, =, backslashes and
// non-ASCII text reaches the step byte-exact, and is nowhere else: not in
// the stored pod, the namespace's events, the API server's audit log (any
// event of the namespace, the value and its base64), the command line of
// any process in the pod, the environment of the agent or of the connect
// bridges, the agent's state directory, or the environment of another
// step. The value is never put on an exec's command line by the test
// either (exec commands are in the audit log). It pins a secret that
// leaks or arrives mangled.
func TestKube_SecretReachesTheStepByteExactAndNowhereElse(t *testing.T) {
	f := newFixture(t)
	tok := make([]byte, 12)
	_, _ = rand.Read(tok)
	token := "kx" + hex.EncodeToString(tok)
	value := "first line\nsecond \"double\" 'single' $HOME ${LIB} `id` $(id) a=b==c \\back\\slash\\n\r\n" +
		"ünïcødé ✓ 日本語 " + token + "\ttab end\\"
	b64 := base64.StdEncoding.EncodeToString([]byte(value))
	jsonValue, _ := json.Marshal(value)
	needles := map[string][]byte{
		"token":              []byte(token),
		"value":              []byte(value),
		"value as JSON":      jsonValue[1 : len(jsonValue)-1],
		"base64":             []byte(b64),
		"base64 url":         []byte(base64.URLEncoding.EncodeToString([]byte(value))),
		"base64 of token":    []byte(base64.StdEncoding.EncodeToString([]byte(token))[:20]),
		"value's first line": []byte("second \"double\" 'single' $HOME ${LIB}"),
	}
	find := func(where string, b []byte) {
		t.Helper()
		for name, n := range needles {
			if bytes.Contains(b, n) {
				i := bytes.Index(b, n)
				t.Errorf("the secret (%s) is in %s: ...%q...", name, where, b[max(0, i-80):min(len(b), i+len(n)+40)])
			}
		}
	}

	e := f.executor(t, f.config())
	// A canary (not secret) in a label: the searches below must find it,
	// or they search nothing.
	canary := "canary" + hex.EncodeToString(tok[:6])
	spec := f.spec(t, runID("secret"))
	spec.Labels = map[string]string{"knotless.dev/canary": canary}
	s := f.prepare(t, e, spec)
	pod := podOf(t, s)
	gate := f.gate(pod)(t)

	// Step 1 has the secret; it writes it to a file and as hex, then
	// waits at the gate while the test looks at the pod's processes.
	var out syncbuf.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	ch := startStep(ctx, s, executor.Step{
		ID: "1", Env: map[string]string{"PLAIN": "plain"}, Secrets: map[string]string{"SECRET_VALUE": value},
		Script: `printf '%s' "$SECRET_VALUE" > /tmp/secret.out
printf '%s' "$SECRET_VALUE" | od -An -v -tx1 | tr -d ' \n'; echo
echo waiting; ` + gate.Wait + `
echo released`,
	}, &out)
	wantHex := hex.EncodeToString([]byte(value)) + "\nwaiting\n"
	waitOutput(t, &out, wantHex, time.Minute)

	// Every process of the pod while the step runs: command lines never
	// hold the secret; environments only in the step's own processes.
	// The first exec's command carries a marker (not secret) that the
	// audit scan below must see, with at least as many pods/exec events
	// as the test made execs.
	execMarker := "execmarker" + hex.EncodeToString(tok[6:])
	pids := f.podOutput(t, pod, `: `+execMarker+`; for d in /proc/[0-9]*; do echo ${d#/proc/}; done`)
	execs := 1
	steps := 0
	for _, pid := range strings.Fields(string(pids)) {
		cmdline, err := f.podExec(ctx, pod, "cat /proc/"+pid+"/cmdline")
		execs++
		if err != nil {
			continue // gone meanwhile (our own cat, for one)
		}
		environ, err := f.podExec(ctx, pod, "cat /proc/"+pid+"/environ")
		execs++
		if err != nil {
			t.Errorf("read the environment of pid %s (%q): %v", pid, cmdline, err)
			continue
		}
		argv := strings.ReplaceAll(string(cmdline), "\x00", " ")
		find("the command line of pid "+pid+" ("+argv+")", cmdline)
		if bytes.Contains(environ, []byte("\x00PLAIN=plain\x00")) || bytes.HasPrefix(environ, []byte("PLAIN=plain\x00")) {
			// A process of step 1: the secret is its variable, byte-exact.
			steps++
			if !bytes.Contains(environ, []byte("SECRET_VALUE="+value+"\x00")) {
				t.Errorf("step process %s (%s) has no byte-exact SECRET_VALUE", pid, argv)
			}
			continue
		}
		if pid == "1" || strings.Contains(argv, " connect ") {
			t.Logf("pid %s: %s", pid, argv)
		}
		find("the environment of pid "+pid+" ("+argv+")", environ)
	}
	if steps == 0 {
		t.Error("found no process of the step (the check of environments checked nothing)")
	}
	gate.Open(t)
	res, err := await(t, ch, time.Minute)
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("step 1: %+v %v %q", res, err, out.Bytes())
	}
	if got := string(out.Bytes()); got != wantHex+"released\n" {
		t.Errorf("step 1's output %q, want %q", got, wantHex+"released\n")
	}
	dir := t.TempDir()
	cctx, ccancel := context.WithTimeout(context.Background(), time.Minute)
	defer ccancel()
	if err := s.CopyOut(cctx, "/tmp/secret.out", filepath.Join(dir, "secret.out")); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(filepath.Join(dir, "secret.out")); string(got) != value {
		t.Errorf("the secret as the step saw it: %q, want %q", got, value)
	}
	// The agent never writes the secret down.
	if err := s.CopyOut(cctx, agentenv.AgentState, filepath.Join(dir, "state")); err != nil {
		t.Fatal(err)
	}
	_ = filepath.Walk(filepath.Join(dir, "state"), func(p string, fi os.FileInfo, err error) error {
		if err == nil && fi.Mode().IsRegular() {
			b, _ := os.ReadFile(p)
			find("the agent's state file "+strings.TrimPrefix(p, dir), b)
		}
		return nil
	})

	// Step 2 has no secrets: its environment does not have it.
	res, out2, err := runStep(t, s, "2", `cat /proc/self/environ; echo; env`, time.Minute)
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("step 2: %+v %v", res, err)
	}
	find("the environment of a later step", out2)

	// The pod as stored, and the namespace's events.
	stored, _ := json.Marshal(f.storedPod(t, pod))
	find("the stored pod", stored)
	events, err := f.c.Client.CoreV1().Events(f.ns).List(cctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	evJSON, _ := json.Marshal(events)
	find("the namespace's events", evJSON)
	t.Logf("checked the stored pod (%d bytes) and %d events", len(stored), len(events.Items))

	// The audit log, once it has the pod's deletion (so everything of the
	// run before it is written).
	if err := s.Cleanup(cctx); err != nil {
		t.Fatal(err)
	}
	f.c.WaitAuditQuery(t, time.Minute, kubetest.AuditQuery{Verb: "delete", Resource: "pods", Namespace: f.ns, Name: pod})
	canaries, n := 0, 0
	execIDs := map[string]bool{} // audit IDs of pods/exec events of the namespace
	markerSeen := false
	lines, err := kubetest.ScanAuditLog(f.c.AuditLogPath, func(line []byte) {
		if !kubetest.AuditLineOfNamespace(line, f.ns) {
			return
		}
		n++
		find("the audit log", line)
		if bytes.Contains(line, []byte(canary)) {
			canaries++
		}
		var ev kubetest.AuditEvent
		if bytes.Contains(line, []byte(`"subresource":"exec"`)) && json.Unmarshal(line, &ev) == nil &&
			ev.ObjectRef != nil && ev.ObjectRef.Subresource == "exec" && ev.ObjectRef.Namespace == f.ns {
			execIDs[ev.AuditID] = true
			markerSeen = markerSeen || strings.Contains(ev.RequestURI, execMarker)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if n == 0 {
		t.Fatalf("no audit event of the namespace among %d lines: the search searched nothing", lines)
	}
	if canaries == 0 || !bytes.Contains(stored, []byte(canary)) {
		t.Fatalf("the canary label is in %d audit events and the stored pod: %v; the searches do not see pod bodies", canaries, bytes.Contains(stored, []byte(canary)))
	}
	// Exec commands are where a test or an executor would put a secret on
	// a command line: the scan must have read them, the test's own first.
	if len(execIDs) < execs || !markerSeen {
		t.Fatalf("the audit scan saw %d pods/exec requests of namespace %s (the test's marked exec among them: %v); the test made %d: it did not scan the exec commands", len(execIDs), f.ns, markerSeen, execs)
	}
	t.Logf("searched %d audit events of namespace %s among %d lines of the log and its backups: %d hold the pod's body with the canary label, %d are pods/exec requests (the test made %d)", n, f.ns, lines, canaries, len(execIDs), execs)
}

// podOutput runs script in the pod as the admin and fails on error.
func (f *fixture) podOutput(t *testing.T, pod, script string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := f.podExec(ctx, pod, script)
	if err != nil {
		t.Fatalf("exec in %s: %v", pod, err)
	}
	return out
}
