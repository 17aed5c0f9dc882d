package kubetest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"
)

// AuditEvent is the part of an audit.k8s.io/v1 Event (one line of the API
// server's JSON audit log) that tests search on. Request and response
// bodies are left out.
type AuditEvent struct {
	Level                    string            `json:"level"`
	AuditID                  string            `json:"auditID"`
	Stage                    string            `json:"stage"` // ResponseStarted, ResponseComplete, Panic
	RequestURI               string            `json:"requestURI"`
	Verb                     string            `json:"verb"` // get, list, watch, create, update, patch, delete, ...
	User                     AuditUser         `json:"user"`
	ImpersonatedUser         *AuditUser        `json:"impersonatedUser,omitempty"`
	SourceIPs                []string          `json:"sourceIPs,omitempty"`
	UserAgent                string            `json:"userAgent,omitempty"`
	ObjectRef                *AuditObjectRef   `json:"objectRef,omitempty"`
	ResponseStatus           *AuditStatus      `json:"responseStatus,omitempty"`
	RequestReceivedTimestamp time.Time         `json:"requestReceivedTimestamp"`
	StageTimestamp           time.Time         `json:"stageTimestamp"`
	Annotations              map[string]string `json:"annotations,omitempty"`
}

// AuditUser is the authenticated user of a request.
type AuditUser struct {
	Username string   `json:"username"`
	UID      string   `json:"uid,omitempty"`
	Groups   []string `json:"groups,omitempty"`
	// Extra is what the authenticator added (a JWT issuer's claim mappings).
	Extra map[string][]string `json:"extra,omitempty"`
}

// AuditObjectRef names the object a request was about.
type AuditObjectRef struct {
	Resource    string `json:"resource,omitempty"`
	Namespace   string `json:"namespace,omitempty"`
	Name        string `json:"name,omitempty"`
	UID         string `json:"uid,omitempty"`
	APIGroup    string `json:"apiGroup,omitempty"`
	APIVersion  string `json:"apiVersion,omitempty"`
	Subresource string `json:"subresource,omitempty"`
}

// AuditStatus is the response's status (code is the HTTP status).
type AuditStatus struct {
	Code    int    `json:"code"`
	Status  string `json:"status,omitempty"`
	Reason  string `json:"reason,omitempty"`
	Message string `json:"message,omitempty"`
}

// AuditQuery matches audit events field by field; empty fields match
// anything.
type AuditQuery struct {
	Verb, Resource, Subresource, Namespace, Name string
	User                                         string // user.username
	RequestURIContains                           string
	UserAgentPrefix                              string
	Code                                         int // responseStatus.code, e.g. 429
}

// Match reports whether ev has every field q sets.
func (q AuditQuery) Match(ev AuditEvent) bool {
	ref := AuditObjectRef{}
	if ev.ObjectRef != nil {
		ref = *ev.ObjectRef
	}
	return (q.Verb == "" || q.Verb == ev.Verb) &&
		(q.Resource == "" || q.Resource == ref.Resource) &&
		(q.Subresource == "" || q.Subresource == ref.Subresource) &&
		(q.Namespace == "" || q.Namespace == ref.Namespace) &&
		(q.Name == "" || q.Name == ref.Name) &&
		(q.User == "" || q.User == ev.User.Username) &&
		(q.RequestURIContains == "" || strings.Contains(ev.RequestURI, q.RequestURIContains)) &&
		(q.UserAgentPrefix == "" || strings.HasPrefix(ev.UserAgent, q.UserAgentPrefix)) &&
		(q.Code == 0 || ev.ResponseStatus != nil && ev.ResponseStatus.Code == q.Code)
}

// prefilter reports whether a raw log line may hold an event q matches:
// it must contain q's namespace and name, which are DNS names and so
// appear unescaped in the JSON. Skipping other lines without decoding them
// makes a search of a large log (bodies of pods and exec requests are
// logged in full) about ten times faster.
func (q AuditQuery) prefilter(line []byte) bool {
	for _, s := range []string{q.Namespace, q.Name} {
		if s != "" && !bytes.Contains(line, []byte(s)) {
			return false
		}
	}
	return true
}

// Search is SearchAuditLog for the events q matches, skipping lines that
// cannot match without decoding them.
func (q AuditQuery) Search(ctx context.Context, path string) (AuditEvent, error) {
	return searchAuditLog(ctx, path, q.prefilter, q.Match)
}

func (q AuditQuery) String() string {
	b, _ := json.Marshal(q)
	return string(b)
}

// SearchAuditLog reads the JSON-lines audit log at path (first its rotated
// backups audit-*.log beside it, oldest first, then the file itself,
// following rotation) until an event satisfies match, and returns it. It
// polls for new lines until ctx ends; the error then says how many events
// were read. Lines that are not JSON objects are skipped.
func SearchAuditLog(ctx context.Context, path string, match func(AuditEvent) bool) (AuditEvent, error) {
	return searchAuditLog(ctx, path, nil, match)
}

func searchAuditLog(ctx context.Context, path string, prefilter func([]byte) bool, match func(AuditEvent) bool) (AuditEvent, error) {
	tail := &auditTail{path: path, prefilter: prefilter}
	defer tail.close()
	for {
		ev, ok, err := tail.poll(match)
		if err != nil {
			return AuditEvent{}, fmt.Errorf("search audit log %s: %w", path, err)
		}
		if ok {
			return ev, nil
		}
		if err := sleep(ctx, 250*time.Millisecond); err != nil {
			return AuditEvent{}, fmt.Errorf("search audit log %s: no matching event among %d lines read: %w",
				path, tail.lines, err)
		}
	}
}

// WaitAuditEvent is SearchAuditLog on the cluster's audit log, bounded by
// timeout, failing the test with what (a description of the event) when
// no event matches. Prefer WaitAuditQuery where a query can say it: it
// is faster on a large log.
func (c *Cluster) WaitAuditEvent(t testing.TB, timeout time.Duration, what string, match func(AuditEvent) bool) AuditEvent {
	t.Helper()
	ev, err := SearchAuditLog(stepContext(t, timeout), c.AuditLogPath, match)
	if err != nil {
		t.Fatalf("wait %s for audit event %s: %v", timeout, what, err)
	}
	return ev
}

// WaitAuditQuery is WaitAuditEvent for the events q matches.
func (c *Cluster) WaitAuditQuery(t testing.TB, timeout time.Duration, q AuditQuery) AuditEvent {
	t.Helper()
	ev, err := q.Search(stepContext(t, timeout), c.AuditLogPath)
	if err != nil {
		t.Fatalf("wait %s for audit event %s: %v", timeout, q, err)
	}
	return ev
}

// auditTail reads a log file line by line across polls, keeping an
// incomplete last line for the next poll and following renames (the API
// server rotates the file by renaming it and creating a new one).
type auditTail struct {
	path    string
	started bool
	f       *os.File
	rd      *bufio.Reader
	partial []byte
	lines   int

	prefilter func([]byte) bool // nil: decode every line
}

func (a *auditTail) close() {
	if a.f != nil {
		a.f.Close()
	}
}

// poll returns the first matching event among the lines not read yet.
func (a *auditTail) poll(match func(AuditEvent) bool) (AuditEvent, bool, error) {
	if !a.started {
		a.started = true
		for _, b := range auditBackups(a.path) {
			if ev, ok, err := a.scanFile(b, match); ok || err != nil {
				return ev, ok, err
			}
		}
	}
	for {
		if a.f == nil {
			f, err := os.Open(a.path)
			if errors.Is(err, fs.ErrNotExist) {
				return AuditEvent{}, false, nil
			}
			if err != nil {
				return AuditEvent{}, false, err
			}
			a.f, a.rd, a.partial = f, bufio.NewReaderSize(f, 1<<20), nil
		}
		if ev, ok, err := a.readLines(match); ok || err != nil {
			return ev, ok, err
		}
		// At the end of our file: has the path been rotated to a new one?
		cur, err1 := os.Stat(a.path)
		open, err2 := a.f.Stat()
		if err1 != nil || err2 != nil || os.SameFile(cur, open) {
			return AuditEvent{}, false, nil
		}
		// Our handle still reads the renamed file: finish it, then reopen.
		if ev, ok, err := a.readLines(match); ok || err != nil {
			return ev, ok, err
		}
		a.f.Close()
		a.f = nil
	}
}

// scanFile reads a whole (rotated, complete) file once.
func (a *auditTail) scanFile(path string, match func(AuditEvent) bool) (AuditEvent, bool, error) {
	f, err := os.Open(path)
	if err != nil {
		return AuditEvent{}, false, nil // removed by rotation meanwhile
	}
	defer f.Close()
	rd := bufio.NewReaderSize(f, 1<<20)
	for {
		line, err := rd.ReadBytes('\n')
		if ev, ok := a.decode(line, match); ok {
			return ev, true, nil
		}
		if err == io.EOF {
			return AuditEvent{}, false, nil
		}
		if err != nil {
			return AuditEvent{}, false, fmt.Errorf("read %s: %w", path, err)
		}
	}
}

// readLines reads complete lines from the open file up to its current end.
func (a *auditTail) readLines(match func(AuditEvent) bool) (AuditEvent, bool, error) {
	for {
		chunk, err := a.rd.ReadBytes('\n')
		if err == io.EOF {
			a.partial = append(a.partial, chunk...)
			return AuditEvent{}, false, nil
		}
		if err != nil {
			return AuditEvent{}, false, fmt.Errorf("read %s: %w", a.path, err)
		}
		line := chunk
		if len(a.partial) > 0 {
			line = append(a.partial, chunk...)
			a.partial = nil
		}
		if ev, ok := a.decode(line, match); ok {
			return ev, true, nil
		}
	}
}

func (a *auditTail) decode(line []byte, match func(AuditEvent) bool) (AuditEvent, bool) {
	line = bytes.TrimSpace(line)
	if len(line) == 0 {
		return AuditEvent{}, false
	}
	a.lines++
	if line[0] != '{' || (a.prefilter != nil && !a.prefilter(line)) {
		return AuditEvent{}, false
	}
	var ev AuditEvent
	if json.Unmarshal(line, &ev) != nil {
		return AuditEvent{}, false
	}
	return ev, match(ev)
}

// auditBackups lists the rotated files of the audit log at path
// (audit-*.log beside it), oldest first: their names carry the rotation
// time.
func auditBackups(path string) []string {
	backups, _ := filepath.Glob(filepath.Join(filepath.Dir(path), "audit-*.log"))
	sort.Strings(backups)
	return backups
}

// ScanAuditLog hands fn every line of the audit log at path, as it is
// when called: its rotated backups first (audit-*.log beside it, oldest
// first), then the live file. The live file is opened before the backups
// are listed and read to its end even when the API server renames it
// meanwhile, and a file that took its place is read too, so no line
// written before the call is missed (a line may be handed twice). fn gets
// the raw line without its newline; it must not keep it. ScanAuditLog
// returns how many lines it handed over. The API server keeps two backups
// of 200 MB (test/cluster): a scan of a busy cluster's log reads up to
// 600 MB, a few seconds.
func ScanAuditLog(path string, fn func(line []byte)) (int, error) {
	n := 0
	live, err := os.Open(path)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return 0, fmt.Errorf("scan audit log: %w", err)
	}
	var liveInfo os.FileInfo
	if live != nil {
		defer live.Close()
		liveInfo, _ = live.Stat()
	}
	for _, b := range auditBackups(path) {
		if fi, err := os.Stat(b); err == nil && liveInfo != nil && os.SameFile(fi, liveInfo) {
			continue // the live file, renamed since we opened it: read below
		}
		f, err := os.Open(b)
		if errors.Is(err, fs.ErrNotExist) {
			continue // removed by a rotation meanwhile: older than anything asked for
		}
		if err != nil {
			return n, fmt.Errorf("scan audit log: %w", err)
		}
		err = scanLines(f, fn, &n)
		f.Close()
		if err != nil {
			return n, fmt.Errorf("scan audit log %s: %w", b, err)
		}
	}
	if live == nil {
		return n, nil
	}
	if err := scanLines(live, fn, &n); err != nil {
		return n, fmt.Errorf("scan audit log %s: %w", path, err)
	}
	if cur, err := os.Stat(path); err == nil && liveInfo != nil && !os.SameFile(cur, liveInfo) {
		f, err := os.Open(path)
		if err == nil {
			err = scanLines(f, fn, &n)
			f.Close()
		}
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return n, fmt.Errorf("scan audit log %s after its rotation: %w", path, err)
		}
	}
	return n, nil
}

// scanLines hands fn every non-empty line of r, counting them in n.
func scanLines(r io.Reader, fn func(line []byte), n *int) error {
	rd := bufio.NewReaderSize(r, 1<<20)
	for {
		line, err := rd.ReadBytes('\n')
		if line = bytes.TrimRight(line, "\n"); len(line) > 0 {
			*n++
			fn(line)
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// AuditLineOfNamespace reports whether a raw audit log line is about
// namespace ns: its objectRef's namespace or its request URI's.
func AuditLineOfNamespace(line []byte, ns string) bool {
	return bytes.Contains(line, []byte(`"namespace":"`+ns+`"`)) || bytes.Contains(line, []byte("/namespaces/"+ns+"/"))
}
