package executortest

import (
	"bytes"
	"os"
	"os/exec"
	"reflect"
	"strconv"
	"syscall"
	"testing"

	"knotless.dev/knotless/internal/testenv"
)

// TestParseProcs_ReadsStatAndArgvWhateverTheCommAndArgumentsHold pins the
// one reader of /proc the executors' Env.Procs share: a comm with spaces
// and ')' (proc_pid_stat(5) does not escape it), arguments holding a
// newline, and a line of a process that ended mid-read, which is left
// out.
func TestParseProcs_ReadsStatAndArgvWhateverTheCommAndArgumentsHold(t *testing.T) {
	out := []byte("1 (knotless-agent) S 0 1 1 0 -1\n" +
		"/knotless/knotless-agent\x01serve\x01\n" +
		"42 (a) b) (c) Z 1 40 40 0 -1\n" +
		"sh\x01-c\x01echo a\x02echo b\x01\n" +
		"43 (gone\n" +
		"\n" +
		"44 (sleep) R 42 40 40\n" +
		"\n")
	want := []Proc{
		{PID: 1, PGID: 1, State: 'S', Argv: []byte("/knotless/knotless-agent\x00serve\x00")},
		{PID: 42, PGID: 40, State: 'Z', Argv: []byte("sh\x00-c\x00echo a\necho b\x00")},
		{PID: 44, PGID: 40, State: 'R'},
	}
	if got := ParseProcs(out); !reflect.DeepEqual(got, want) {
		t.Errorf("ParseProcs:\n got %+v\nwant %+v", got, want)
	}
	if !ParseProcs(out)[1].Dead() {
		t.Error("a zombie read from its stat line is not Dead")
	}
}

// TestParseProcs_ReadsWhatProcsScriptPrints runs ProcsScript on this host
// and finds this test's own process, its process group and argv, as
// HostProcs reads them.
func TestParseProcs_ReadsWhatProcsScriptPrints(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		testenv.Skipf(t, "no /proc on this machine")
	}
	out, err := exec.Command("/bin/sh", "-c", ProcsScript).Output()
	if err != nil {
		t.Fatalf("ProcsScript: %v", err)
	}
	pid := os.Getpid()
	for _, p := range ParseProcs(out) {
		if p.PID != pid {
			continue
		}
		argv, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
		if pgid, _ := syscall.Getpgid(pid); p.PGID != pgid || !bytes.Equal(p.Argv, argv) || p.Dead() {
			t.Errorf("this process as read: %+v, want pgid %d and argv %q, alive", p, pgid, argv)
		}
		return
	}
	t.Fatalf("ProcsScript's output holds no process %d:\n%s", pid, out)
}
