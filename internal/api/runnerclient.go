package api

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"
)

// RunnerClient makes the runner's calls to its server, one typed method per XRPC
// method, so that no NSID or request shape is spelled out elsewhere. Errors
// are Client's: *Error for an answer other than 2xx (test them with
// IsError and Retryable), else the transport's. Each call is bound
// by its ctx only. A Client is safe for concurrent use.
type RunnerClient struct {
	xrpc    *Client
	session atomic.Pointer[string]
}

// NewRunnerClient returns a RunnerClient over c, typically State.Client's (which signs
// every call with the runner's key). c is not modified.
func NewRunnerClient(c *Client) *RunnerClient {
	cl := &RunnerClient{}
	cp := *c
	auth := c.Auth
	cp.Auth = func(req *http.Request, nsid string) error {
		if auth != nil {
			if err := auth(req, nsid); err != nil {
				return err
			}
		}
		if s := cl.session.Load(); s != nil && nsid != MethodStartSession {
			req.Header.Set(SessionHeader, *s)
		}
		return nil
	}
	cl.xrpc = &cp
	return cl
}

// SetSession makes every later call but StartSession carry session (as
// StartSession answered it) in SessionHeader; "" sends none. Safe to
// call concurrently with calls in flight (they carry the old or the new).
func (c *RunnerClient) SetSession(session string) {
	if session == "" {
		c.session.Store(nil)
		return
	}
	c.session.Store(&session)
}

// Claim long-polls for a queued run the runner qualifies for, for up to
// wait (whole seconds; the server caps it at 60 s). It returns nil, nil when
// none came. ctx must allow wait plus a round trip.
func (c *RunnerClient) Claim(ctx context.Context, wait time.Duration) (*ClaimedRun, error) {
	var out ClaimOutput
	if err := c.xrpc.Procedure(ctx, MethodClaim, ClaimInput{Wait: int(wait / time.Second)}, &out); err != nil {
		return nil, err
	}
	return out.Run, nil
}

// ClaimRuns is Claim for a runner that can take up to n runs now
// (ClaimInput.Max; n < 1 counts as 1, more than MaxClaimRuns as
// MaxClaimRuns): it long-polls for up to wait and returns the runs
// claimed, 1..n oldest first, or none (nil, nil) when none came. The
// runner holds every run returned, each under its own lease, and must
// start them all. A server that predates ClaimInput.Max answers one run.
// Never more than n runs are returned: should a server answer more (none
// does), the rest are left to lapse (errored/runner-lost) and the error
// says which, beside the n runs returned.
func (c *RunnerClient) ClaimRuns(ctx context.Context, wait time.Duration, n int) ([]*ClaimedRun, error) {
	n = min(MaxClaimRuns, max(n, 1))
	var out ClaimOutput
	if err := c.xrpc.Procedure(ctx, MethodClaim, ClaimInput{Wait: int(wait / time.Second), Max: n}, &out); err != nil {
		return nil, err
	}
	runs := out.Claimed()
	if len(runs) > n {
		extra := make([]int64, 0, len(runs)-n)
		for _, r := range runs[n:] {
			extra = append(extra, r.Run.ID)
		}
		return runs[:n], fmt.Errorf("%s: the server answered %d runs to a claim of at most %d; runs %v are left to lapse", MethodClaim, len(runs), n, extra)
	}
	return runs, nil
}

// Heartbeat renews the lease of run; the answer says whether a person
// asked to cancel it. ErrRunFinished and ErrNotFound mean the
// server ended the run or forgot it.
func (c *RunnerClient) Heartbeat(ctx context.Context, run int64) (HeartbeatOutput, error) {
	var out HeartbeatOutput
	err := c.xrpc.Procedure(ctx, MethodHeartbeat, HeartbeatInput{Run: run}, &out)
	return out, err
}

// UpdateStep records a step's change of state. Idempotent.
func (c *RunnerClient) UpdateStep(ctx context.Context, in UpdateStepInput) error {
	return c.xrpc.Procedure(ctx, MethodUpdateStep, in, nil)
}

// AppendLog sends body as the bytes of run's step log from byte offset on
// and returns the log's stored size after the call. Idempotent: bytes the
// server holds already are skipped. An offset past the stored size fails
// with ErrOffsetGap, whose Size is the stored size.
func (c *RunnerClient) AppendLog(ctx context.Context, run int64, step int, offset int64, body []byte) (int64, error) {
	return c.appendLog(ctx, run, step, offset, bytes.NewReader(body), nil)
}

// AppendLogFile is AppendLog with the n bytes of the file at path from
// byte offset on as the body, and times, the line times of those bytes
// (at most MaxLineTimes). They go from the file to the connection with
// sendfile(2), not through this process's memory. Each call reads through
// a descriptor of its own: the HTTP transport may still be reading a
// failed request's body after the call returned.
func (c *RunnerClient) AppendLogFile(ctx context.Context, run int64, step int, offset int64, path string, n int64, times []LineTime) (int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	if _, err := f.Seek(offset, io.SeekStart); err != nil {
		f.Close()
		return 0, err
	}
	// The transport closes the body (and so f) once it is done with it.
	return c.appendLog(ctx, run, step, offset, &fileBody{f: f, end: offset + n, n: n}, times)
}

// fileBody is a request body of the bytes of f up to offset end, from f's
// offset on: a syscall.Conn, which the HTTP transport's copy to a TCP
// connection hands to sendfile(2) (limited to the Content-Length, n).
// Read, which the transport also uses, goes by f's offset, which sendfile
// advances.
type fileBody struct {
	f      *os.File
	end, n int64
}

func (b *fileBody) Read(p []byte) (int, error) {
	pos, err := b.f.Seek(0, io.SeekCurrent)
	if err != nil {
		return 0, err
	}
	if pos >= b.end {
		return 0, io.EOF
	}
	if int64(len(p)) > b.end-pos {
		p = p[:b.end-pos]
	}
	return b.f.Read(p)
}

func (b *fileBody) SyscallConn() (syscall.RawConn, error) { return b.f.SyscallConn() }
func (b *fileBody) Close() error                          { return b.f.Close() }
func (b *fileBody) Size() int64                           { return b.n }

func (c *RunnerClient) appendLog(ctx context.Context, run int64, step int, offset int64, body io.Reader, times []LineTime) (int64, error) {
	params := url.Values{
		"run":    {strconv.FormatInt(run, 10)},
		"step":   {strconv.Itoa(step)},
		"offset": {strconv.FormatInt(offset, 10)},
	}
	if len(times) > 0 {
		params.Set(LogTimesParam, FormatLineTimes(times))
	}
	resp, err := c.xrpc.Do(ctx, http.MethodPost, MethodAppendLog, params, "application/octet-stream", body)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var out AppendLogOutput
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return 0, fmt.Errorf("decode answer of %s: %w", MethodAppendLog, err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	return out.Size, nil
}

// UploadOutputsFile sends the n bytes of the file at path from byte offset
// on as the bytes of run's outputs archive from offset, the archive being
// size bytes long with the hex SHA-256 sum. It returns how much of it the
// server holds and whether the server stored it (complete and verified).
// Errors as MethodUploadOutputs describes them: ErrOffsetGap (with
// the size held), ErrOutputsCorrupt (send again from 0),
// ErrOutputsTooLarge, ErrConflict. Like AppendLogFile, the bytes
// go from the file with sendfile(2) through a descriptor of the call's own.
func (c *RunnerClient) UploadOutputsFile(ctx context.Context, run, offset, size int64, sum, path string, n int64) (UploadOutputsOutput, error) {
	var out UploadOutputsOutput
	f, err := os.Open(path)
	if err != nil {
		return out, err
	}
	if _, err := f.Seek(offset, io.SeekStart); err != nil {
		f.Close()
		return out, err
	}
	params := url.Values{
		"run":    {strconv.FormatInt(run, 10)},
		"offset": {strconv.FormatInt(offset, 10)},
		"size":   {strconv.FormatInt(size, 10)},
		"sha256": {sum},
	}
	resp, err := c.xrpc.Do(ctx, http.MethodPost, MethodUploadOutputs, params, "application/octet-stream", &fileBody{f: f, end: offset + n, n: n})
	if err != nil {
		return out, err
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return out, fmt.Errorf("decode answer of %s: %w", MethodUploadOutputs, err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	return out, nil
}

// Complete records the run's final state. Repeating the same call
// succeeds; another final state fails with ErrRunFinished.
func (c *RunnerClient) Complete(ctx context.Context, in CompleteInput) error {
	return c.xrpc.Procedure(ctx, MethodComplete, in, nil)
}

// StartSession opens a new session of the runner's identity, superseding
// every earlier one, lists the runs the runner holds, and makes every later
// call of c carry the new session (SetSession).
func (c *RunnerClient) StartSession(ctx context.Context, in StartSessionInput) (StartSessionOutput, error) {
	var out StartSessionOutput
	err := c.xrpc.Procedure(ctx, MethodStartSession, in, &out)
	if err == nil {
		c.SetSession(out.Session)
	}
	return out, err
}

// Handover ends the current session and leaves its runs to the runner's
// next session for the server's handover grace.
func (c *RunnerClient) Handover(ctx context.Context, in HandoverInput) (HandoverOutput, error) {
	var out HandoverOutput
	err := c.xrpc.Procedure(ctx, MethodHandover, in, &out)
	return out, err
}

// ResumeRun returns what a claim gave for a run the runner holds (with a
// new run token and the secrets anew) and renews its lease.
// ErrRunFinished: the run is final; ErrForbidden: another runner
// holds it.
func (c *RunnerClient) ResumeRun(ctx context.Context, run int64) (*ClaimedRun, error) {
	var out ClaimedRun
	if err := c.xrpc.Procedure(ctx, MethodResumeRun, RunRef{Run: run}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// NeedOutputs returns the body of need's outputs archive for run (a run
// the runner holds that needs need) and the SHA-256 the server names for
// it; the caller reads and closes the body, and checks the sum.
func (c *RunnerClient) NeedOutputs(ctx context.Context, run, need int64) (io.ReadCloser, string, error) {
	params := url.Values{"run": {strconv.FormatInt(run, 10)}, "need": {strconv.FormatInt(need, 10)}}
	resp, err := c.xrpc.Do(ctx, http.MethodPost, MethodGetNeedOutputs, params, "", nil)
	if err != nil {
		return nil, "", err
	}
	return resp.Body, resp.Header.Get(OutputsSHA256Header), nil
}

// EnvironmentsRemoved tells the server that the runner removed every
// environment it made but those of the runs in keep.
func (c *RunnerClient) EnvironmentsRemoved(ctx context.Context, keep []int64) error {
	return c.xrpc.Procedure(ctx, MethodEnvironmentsRemoved, EnvironmentsRemovedInput{Keep: keep}, nil)
}

// IDTokens asks for the id tokens in.Names of step in.Step of in.Run
// (MethodIDTokens). The same input gives the same tokens. Their values
// are secrets: never log them.
func (c *RunnerClient) IDTokens(ctx context.Context, in IDTokensInput) (IDTokensOutput, error) {
	var out IDTokensOutput
	err := c.xrpc.Procedure(ctx, MethodIDTokens, in, &out)
	return out, err
}
