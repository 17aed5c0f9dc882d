package server

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"unicode/utf8"

	"knotless.dev/knotless/internal/api"
)

// Sizes of free text runners report; longer text is cut (and says so)
// rather than refused, so that a run's result is never lost over the
// length of its message.
const (
	maxStepName   = 256  // UpdateStepInput.Name, bytes
	maxReason     = 64   // UpdateStepInput.Reason, CompleteInput.Reason
	maxMessage    = 4096 // CompleteInput.Message
	maxPublicKey  = 256  // RegisterRunnerInput.PublicKey (multibase; P-256 is 49)
	maxLogAttr    = 512  // a string in one log line
	maxEchoedName = 80   // a refused name quoted in an error message
)

// Default page sizes of the list queries.
const (
	defaultRunPage    = 50
	defaultRunnerPage = 100
)

// pageLimit reads a list query's "limit" parameter: def when absent,
// 1..Config.MaxListPage.
func (s *Server) pageLimit(r *http.Request, def int) (int, error) {
	limit, err := intParam(r, "limit", int64(def))
	if err != nil {
		return 0, err
	}
	if limit <= 0 || limit > int64(s.cfg.MaxListPage) {
		return 0, badRequest("limit must be 1..%d (the server's --max-list-page); read further pages with the answer's cursor",
			s.cfg.MaxListPage)
	}
	return int(limit), nil
}

// checkStep refuses a step index past Config.MaxStepIndex.
func (s *Server) checkStep(step int64) error {
	if step < 0 || step > int64(s.cfg.MaxStepIndex) {
		return badRequest("step %d: want 0..%d (workflows have fewer steps; the server's --max-step-index)",
			step, s.cfg.MaxStepIndex)
	}
	return nil
}

// checkRegistration bounds a runner registration before anything is
// looked up: its name, the number and shape of its labels and the size of
// its public key.
func (s *Server) checkRegistration(in *api.RegisterRunnerInput) error {
	if err := api.CheckRunnerName("runner name", in.Name); err != nil {
		return badRequest("%v", err)
	}
	if len(in.Labels) > s.cfg.MaxRunnerLabels {
		return badRequest("%d labels: a runner takes at most %d (the server's --max-runner-labels); give it fewer --label values",
			len(in.Labels), s.cfg.MaxRunnerLabels)
	}
	for _, l := range in.Labels {
		if err := api.CheckRunnerName("label", l); err != nil {
			return badRequest("%v", err)
		}
	}
	if len(in.PublicKey) > maxPublicKey {
		return badRequest("publicKey of %d bytes: a multibase public key has at most %d", len(in.PublicKey), maxPublicKey)
	}
	return nil
}

// tooManyPending is the answer to a registration past
// Config.MaxPendingRunners.
func (s *Server) tooManyPending(repo string) error {
	return xerr(http.StatusTooManyRequests, api.ErrTooManyPending,
		"%s has %d runners awaiting approval (the server's --max-pending-runners): an owner approves or removes them first (knotless runner list --repo %s)",
		repo, s.cfg.MaxPendingRunners, repo)
}

// cut shortens s to at most n bytes (on a rune boundary), saying how long
// it was.
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	end := n
	for end > 0 && !utf8.RuneStart(s[end]) {
		end--
	}
	return fmt.Sprintf("%s...[%d bytes]", s[:end], len(s))
}

// clipHandler keeps log lines short whatever clients send: every string
// (the message, string attributes, errors) is cut to maxLogAttr bytes.
type clipHandler struct{ h slog.Handler }

func (c clipHandler) Enabled(ctx context.Context, l slog.Level) bool { return c.h.Enabled(ctx, l) }

func (c clipHandler) Handle(ctx context.Context, r slog.Record) error {
	out := slog.NewRecord(r.Time, r.Level, cut(r.Message, maxLogAttr), r.PC)
	r.Attrs(func(a slog.Attr) bool {
		out.AddAttrs(clipAttr(a))
		return true
	})
	return c.h.Handle(ctx, out)
}

func (c clipHandler) WithAttrs(as []slog.Attr) slog.Handler {
	clipped := make([]slog.Attr, len(as))
	for i, a := range as {
		clipped[i] = clipAttr(a)
	}
	return clipHandler{c.h.WithAttrs(clipped)}
}

func (c clipHandler) WithGroup(name string) slog.Handler { return clipHandler{c.h.WithGroup(name)} }

func clipAttr(a slog.Attr) slog.Attr {
	v := a.Value.Resolve()
	switch v.Kind() {
	case slog.KindString:
		return slog.String(a.Key, cut(v.String(), maxLogAttr))
	case slog.KindGroup:
		g := v.Group()
		out := make([]any, len(g))
		for i, ga := range g {
			out[i] = clipAttr(ga)
		}
		return slog.Group(a.Key, out...)
	case slog.KindAny:
		switch x := v.Any().(type) {
		case error:
			return slog.String(a.Key, cut(x.Error(), maxLogAttr))
		case fmt.Stringer:
			return slog.String(a.Key, cut(x.String(), maxLogAttr))
		case []string:
			return slog.String(a.Key, cut(fmt.Sprint(x), maxLogAttr))
		}
	}
	return slog.Attr{Key: a.Key, Value: v}
}
