package cli

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"

	"knotless.dev/knotless/internal/api"
)

// Exit codes of the knotless command. They are documented in the root
// command's help (exitCodesHelp); scripts rely on them.
const (
	ExitOK          = 0   // success
	ExitFailed      = 1   // the thing failed: lint errors, a followed run did not succeed, a conflict
	ExitUsage       = 2   // usage error: unknown command or flag, bad argument, invalid request
	ExitUnavailable = 3   // server unreachable, or it answered 5xx
	ExitAuth        = 4   // not logged in, token refused (401), or not allowed (403)
	ExitNotFound    = 5   // the repository, run, secret or runner does not exist (404)
	ExitInterrupted = 130 // interrupted by SIGINT/SIGTERM
)

const exitCodesHelp = `Exit codes:
  0    success
  1    the thing failed: lint errors, a followed run did not succeed, a conflict
  2    usage error: unknown command or flag, bad argument, request refused as invalid
  3    server unreachable, or it failed (HTTP 5xx)
  4    not logged in, token refused, or not allowed (HTTP 401/403)
  5    not found (HTTP 404)
  130  interrupted`

// exitError is an error with an exit code and a one-line message for
// stderr. An empty msg means everything was already said (e.g. lint errors
// were printed) and nothing more is printed.
type exitError struct {
	code int
	msg  string
	err  error
}

func (e *exitError) Error() string {
	if e.msg == "" && e.err != nil {
		return e.err.Error()
	}
	return e.msg
}

func (e *exitError) Unwrap() error { return e.err }

// usageErrorf is a usage error (exit 2).
func usageErrorf(format string, args ...any) error {
	return &exitError{code: ExitUsage, msg: fmt.Sprintf(format, args...)}
}

// failf is a failure of the thing asked for (exit 1).
func failf(format string, args ...any) error {
	return &exitError{code: ExitFailed, msg: fmt.Sprintf(format, args...)}
}

// errSilentFailure ends with exit 1 and prints nothing more.
var errSilentFailure = &exitError{code: ExitFailed}

// errNotLoggedIn is returned when no server or token is configured.
var errNotLoggedIn = &exitError{code: ExitAuth,
	msg: "not logged in: run knotless login --server URL (or set KNOTLESS_SERVER and KNOTLESS_TOKEN)"}

// errContext is what classify knows of the command that failed, to choose
// hints: the server in use, the repository it was about (if any), whether
// the command's own code ran, and whether it was login.
type errContext struct {
	server     string
	repo       string
	ranCommand bool
	login      bool
}

// classify turns any error a command returned into an exit code and the one
// line to print on stderr (empty: print nothing). The context's server is
// the server URL in use, if known, for messages; ranCommand is false when
// the error came from cobra itself (unknown command, bad flag, wrong number
// of arguments).
func classify(err error, c errContext) (int, string) {
	if err == nil {
		return ExitOK, ""
	}
	var ee *exitError
	if errors.As(err, &ee) {
		return ee.code, oneLine(ee.Error())
	}
	if !c.ranCommand {
		return ExitUsage, oneLine(err.Error())
	}
	if errors.Is(err, context.Canceled) {
		return ExitInterrupted, "interrupted"
	}
	var ae *api.Error
	if errors.As(err, &ae) {
		return classifyAPI(err, ae, c)
	}
	if errors.Is(err, errTimedOut) || errors.Is(err, errTransfer) {
		return ExitUnavailable, oneLine(err.Error()) + ": check the server (knotless whoami)"
	}
	if cause, ok := transportCause(err); ok {
		return ExitUnavailable, oneLine(fmt.Sprintf("cannot reach the server at %s: %s: check that knotless-server is running and the URL is right (knotless login --server URL)", orURL(c.server), cause))
	}
	return ExitFailed, oneLine(err.Error())
}

// classifyAPI is classify for an answer of the server (ae, inside err). The
// server's message is printed once, without the XRPC error name, after
// what the command was doing; a hint is added only when the message does
// not already say it.
func classifyAPI(err error, ae *api.Error, c errContext) (int, string) {
	msg := oneLine(apiMessage(err, ae))
	lower := strings.ToLower(msg)
	switch {
	case ae.Status == http.StatusUnauthorized:
		switch {
		case c.login:
			msg = withHint(msg, "the first admin's token is in DATA/admin.token of the server, other accounts get theirs from knotless account create")
		case !strings.Contains(lower, "knotless login"):
			msg = withHint(msg, "log in again with a valid token: knotless login --server "+orURL(c.server))
		}
		return ExitAuth, msg
	case ae.Status == http.StatusForbidden:
		if c.repo != "" && !strings.Contains(lower, "owner") && !strings.Contains(lower, "admin") {
			msg = withHint(msg, "ask an owner of "+c.repo+" or an admin")
		}
		return ExitAuth, msg
	case ae.Status == http.StatusNotFound:
		return ExitNotFound, msg
	case ae.Status == http.StatusBadRequest:
		return ExitUsage, msg
	case ae.Status >= 500:
		if !strings.Contains(lower, "log") && !strings.Contains(lower, "try again") {
			msg = withHint(msg, "the server failed: try again, or check the server's log")
		}
		return ExitUnavailable, msg
	}
	return ExitFailed, msg
}

// apiMessage is err's text with the server's error (ae) reduced to its
// message: no XRPC error name in front ("Conflict: ..."), and no trailing
// repeat of that name (": conflict"). Without a message it keeps
// "Name (HTTP status)".
func apiMessage(err error, ae *api.Error) string {
	full := err.Error()
	m := strings.TrimSpace(ae.Message)
	if m == "" {
		return full
	}
	name := strings.ToLower(spaceWords(ae.Name))
	if rest, ok := strings.CutSuffix(m, ": "+name); ok && name != "" {
		m = rest
	}
	return strings.Replace(full, ae.Error(), m, 1)
}

// spaceWords turns "NotFound" into "Not Found".
func spaceWords(name string) string {
	var b strings.Builder
	for i, r := range name {
		if i > 0 && r >= 'A' && r <= 'Z' {
			b.WriteByte(' ')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// withHint adds a hint to a message: after ": " when the message is a
// clause, as its own sentence when the message ends like one.
func withHint(msg, hint string) string {
	if strings.HasSuffix(msg, ".") || strings.HasSuffix(msg, "!") || strings.HasSuffix(msg, "?") {
		return msg + " " + strings.ToUpper(hint[:1]) + hint[1:] + "."
	}
	return msg + ": " + hint
}

// transportCause returns the short cause of a failure to talk to the server
// at all (e.g. "connect: connection refused"), and whether err is one.
func transportCause(err error) (string, bool) {
	var ue *url.Error
	if !errors.As(err, &ue) && !errors.Is(err, context.DeadlineExceeded) {
		return "", false
	}
	var oe *net.OpError
	switch {
	case errors.As(err, &oe):
		return oe.Err.Error(), true
	case ue != nil:
		return ue.Err.Error(), true
	}
	return err.Error(), true
}

func orURL(server string) string {
	if server == "" {
		return "URL"
	}
	return server
}

// oneLine folds a message onto one line.
func oneLine(s string) string {
	s = strings.TrimSpace(s)
	s = strings.ReplaceAll(s, "\r", "")
	return strings.ReplaceAll(s, "\n", "; ")
}
