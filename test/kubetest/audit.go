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
		backups, _ := filepath.Glob(filepath.Join(filepath.Dir(a.path), "audit-*.log"))
		sort.Strings(backups) // names carry the rotation time
		for _, b := range backups {
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
