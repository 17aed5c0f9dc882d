package kubetest_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"knotless.dev/knotless/test/kubetest"
)

// These need no cluster: they pin the audit log reader on files.

const (
	auditGet  = `{"level":"Metadata","auditID":"a1","stage":"ResponseComplete","requestURI":"/api/v1/namespaces/kt-x/pods/p","verb":"get","user":{"username":"admin"},"objectRef":{"resource":"pods","namespace":"kt-x","name":"p","apiVersion":"v1"},"responseStatus":{"metadata":{},"code":200},"requestReceivedTimestamp":"2026-07-01T10:00:00.000000Z","stageTimestamp":"2026-07-01T10:00:00.001000Z"}` + "\n"
	auditExec = `{"level":"RequestResponse","auditID":"a2","stage":"ResponseStarted","requestURI":"/api/v1/namespaces/kt-x/pods/p/exec?command=true\u0026container=main","verb":"get","user":{"username":"system:serviceaccount:kt-x:runner"},"objectRef":{"resource":"pods","namespace":"kt-x","name":"p","apiVersion":"v1","subresource":"exec"},"responseStatus":{"metadata":{},"code":101},"requestReceivedTimestamp":"2026-07-01T10:00:01.000000Z","stageTimestamp":"2026-07-01T10:00:01.100000Z"}` + "\n"
)

var execQuery = kubetest.AuditQuery{Resource: "pods", Subresource: "exec", Namespace: "kt-x", Name: "p",
	User: "system:serviceaccount:kt-x:runner", RequestURIContains: "command=true"}

// readA1 is execQuery.Match that also closes the channel it returns once
// the reader has read event a1 (auditGet): the test then knows the reader
// is past the file's first line, instead of sleeping and hoping.
func readA1() (func(kubetest.AuditEvent) bool, <-chan struct{}) {
	seen := make(chan struct{})
	var once sync.Once
	return func(ev kubetest.AuditEvent) bool {
		if ev.AuditID == "a1" {
			once.Do(func() { close(seen) })
		}
		return execQuery.Match(ev)
	}, seen
}

func TestAuditSearchFindsAnEventWrittenInPiecesAfterItStarted(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.log")
	if err := os.WriteFile(path, []byte(auditGet+"not json\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	found := make(chan kubetest.AuditEvent, 1)
	errc := make(chan error, 1)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	match, readFirst := readA1()
	go func() {
		ev, err := kubetest.SearchAuditLog(ctx, path, match)
		found <- ev
		errc <- err
	}()
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	// Half a line first, once the reader is at the file's end: it must wait
	// for the rest. (Longer than one of its 250 ms polls, so that it reads
	// the half line: a wait for time, not for a state.)
	select {
	case <-readFirst:
	case err := <-errc:
		t.Fatalf("the search ended before reading the first line: %v", err)
	}
	half := len(auditExec) / 2
	f.WriteString(auditExec[:half])
	time.Sleep(300 * time.Millisecond)
	f.WriteString(auditExec[half:])
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	ev := <-found
	if ev.AuditID != "a2" || ev.ResponseStatus == nil || ev.ResponseStatus.Code != 101 || ev.Stage != "ResponseStarted" {
		t.Errorf("found %+v, want event a2 with code 101", ev)
	}
}

func TestAuditSearchFollowsRotationAndReadsBackups(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "audit.log")
	if err := os.WriteFile(path, []byte(auditGet), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	errc := make(chan error, 1)
	match, readFirst := readA1()
	go func() {
		_, err := kubetest.SearchAuditLog(ctx, path, match)
		errc <- err
	}()
	select {
	case <-readFirst:
	case err := <-errc:
		t.Fatalf("the search ended before reading the first line: %v", err)
	}
	// Rotate as the API server does: rename, then a new file.
	if err := os.Rename(path, filepath.Join(dir, "audit-2026-07-01T10-00-02.000.log")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(auditGet+auditExec), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}

	// An event that is only in a backup is found by a new search.
	if err := os.WriteFile(path, []byte(auditGet), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "audit-2026-07-01T09-00-00.000.log"), []byte(auditExec), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := kubetest.SearchAuditLog(ctx, path, execQuery.Match); err != nil {
		t.Fatal(err)
	}
	if _, err := execQuery.Search(ctx, path); err != nil {
		t.Fatal(err)
	}
}

func TestAuditSearchGivesUpAtTheDeadline(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.log")
	if err := os.WriteFile(path, []byte(auditGet), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
	defer cancel()
	_, err := kubetest.SearchAuditLog(ctx, path, execQuery.Match)
	if err == nil {
		t.Fatal("found an exec event in a log without one")
	}
	t.Log(err)
	// The query's prefilter must not let a line through that its match
	// refuses: same namespace and name, another user.
	other := execQuery
	other.User = "someone-else"
	if ev, err := other.Search(ctx, path); err == nil {
		t.Fatalf("query %s found %+v", other, ev)
	}
}

// ScanAuditLog reads every line written before it was called: the
// backups, oldest first, then the live file, and a file the API server
// rotated to while it read (here: at the live file's first line). A scan
// of the live file alone missed what rotation had moved away.
func TestAuditScanReadsBackupsAndTheLiveFileAcrossARotation(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "audit.log")
	write := func(name, s string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("audit-2026-07-01T09-00-00.000.log", `{"auditID":"b1"}`+"\n")
	write("audit-2026-07-01T09-30-00.000.log", `{"auditID":"b2"}`+"\n\n")
	write("audit.log", `{"auditID":"l1"}`+"\n"+`{"auditID":"l2"}`+"\n")
	var got []string
	rotated := false
	n, err := kubetest.ScanAuditLog(path, func(line []byte) {
		got = append(got, string(line))
		if string(line) == `{"auditID":"l1"}` && !rotated {
			rotated = true
			if err := os.Rename(path, filepath.Join(dir, "audit-2026-07-01T10-00-00.000.log")); err != nil {
				t.Fatal(err)
			}
			write("audit.log", `{"auditID":"n1"}`+"\n")
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{`{"auditID":"b1"}`, `{"auditID":"b2"}`, `{"auditID":"l1"}`, `{"auditID":"l2"}`, `{"auditID":"n1"}`}
	if n != len(want) || strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("scanned %d lines %q, want %q", n, got, want)
	}
	if !kubetest.AuditLineOfNamespace([]byte(auditExec), "kt-x") || kubetest.AuditLineOfNamespace([]byte(auditExec), "kt-y") {
		t.Error("AuditLineOfNamespace does not tell kt-x's exec event from another namespace's")
	}
}
