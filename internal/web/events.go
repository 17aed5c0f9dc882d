package web

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"knotless.dev/knotless/internal/api"
)

// keepAlive is how often a quiet event stream gets a comment line, so
// that proxies do not take it for dead.
const keepAlive = 15 * time.Second

// logEvent is the data of a "log" event: bytes [Off, End) of a step's log
// as text (invalid UTF-8 replaced by U+FFFD; control sequences left for
// the page's script, which renders colours and drops the rest).
type logEvent struct {
	Step int    `json:"step"`
	Off  int64  `json:"off"`
	End  int64  `json:"end"`
	Text string `json:"text"`
	// Times are the line times of [Off, End) and the last one before
	// Off, as [offset, Unix milliseconds] pairs (api.LineTime): a line's
	// time is the last pair's at or before its first byte.
	Times [][2]int64 `json:"times,omitempty"`
}

// newLogEvent makes the event of bytes b of step's log from off, with
// their line times (none when they cannot be read: times are a help).
func (h *Handler) newLogEvent(r *http.Request, s *Session, run int64, step int, off int64, b []byte) logEvent {
	ev := logEvent{Step: step, Off: off, End: off + int64(len(b)), Text: strings.ToValidUTF8(string(b), "\uFFFD")}
	ts, err := h.b.LineTimes(r.Context(), s.Viewer, run, step, ev.Off, ev.End)
	if err != nil {
		h.log.Debug("read line times", "run", run, "step", step, "err", err)
	}
	for _, t := range ts {
		ev.Times = append(ev.Times, [2]int64{t.Offset, t.UnixMS})
	}
	return ev
}

// stateEvent is the data of a "run" event: what the run page shows of the
// run besides the logs.
type stateEvent struct {
	State     string      `json:"state"`
	Reason    string      `json:"reason,omitempty"`
	Message   string      `json:"message,omitempty"`
	Duration  string      `json:"duration,omitempty"`
	CanCancel bool        `json:"canCancel"`
	CanRerun  bool        `json:"canRerun"`
	Steps     []stepState `json:"steps"`
}

type stepState struct {
	Index    int    `json:"index"`
	Name     string `json:"name"`
	State    string `json:"state"`
	Reason   string `json:"reason,omitempty"`
	ExitCode *int   `json:"exitCode,omitempty"`
	Duration string `json:"duration,omitempty"`
	Size     int64  `json:"size"`
}

// parseOffsets reads "STEP:OFFSET,..." (an event id, or the page's from).
func parseOffsets(s string) map[int]int64 {
	out := map[int]int64{}
	for _, part := range strings.Split(s, ",") {
		a, b, ok := strings.Cut(part, ":")
		if !ok {
			continue
		}
		step, err1 := strconv.Atoi(a)
		off, err2 := strconv.ParseInt(b, 10, 64)
		if err1 == nil && err2 == nil && step >= 0 && off >= 0 {
			out[step] = off
		}
	}
	return out
}

func formatOffsets(steps []Step, offs map[int]int64) string {
	var b strings.Builder
	for i, st := range steps {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "%d:%d", st.Index, offs[st.Index])
	}
	return b.String()
}

// cut returns how many bytes of chunk to send now: up to the last newline;
// all of it when the log will not grow or the chunk is full (a line longer
// than maxEvent), but never splitting a UTF-8 sequence.
func cut(chunk []byte, done bool) int {
	if i := strings.LastIndexByte(string(chunk), '\n'); i >= 0 && !(done && len(chunk) < maxEvent) {
		return i + 1
	}
	if !done && len(chunk) < maxEvent {
		return 0
	}
	n := len(chunk)
	if len(chunk) == maxEvent {
		// Back off to the start of an incomplete rune at the end.
		for i := n - 1; i >= 0 && i >= n-utf8.UTFMax; i-- {
			if utf8.RuneStart(chunk[i]) {
				if !utf8.FullRune(chunk[i:]) {
					n = i
				}
				break
			}
		}
	}
	return n
}

// runEvents streams a run as server-sent events: "run" whenever its state
// or steps change, "log" with each step's new bytes (the event's id holds
// every step's next offset, so a reconnecting EventSource resumes exactly
// where it stopped: Last-Event-ID), and "end" once the run is over and
// every log was sent.
func (h *Handler) runEvents(w http.ResponseWriter, r *http.Request, s *Session) {
	id := runID(r)
	if id == 0 {
		http.NotFound(w, r)
		return
	}
	ctx := r.Context()
	changed := h.b.RunChanged(id) // subscribe before looking, every time
	run, err := h.b.Run(ctx, s.Viewer, id)
	if err != nil {
		if isStatus(err, http.StatusForbidden) {
			http.NotFound(w, r)
			return
		}
		h.fail(w, r, s, err)
		return
	}
	offs := parseOffsets(r.URL.Query().Get("from"))
	if last := r.Header.Get("Last-Event-ID"); last != "" {
		offs = parseOffsets(last)
	}
	rc := http.NewResponseController(w)
	hd := w.Header()
	hd.Set("Content-Type", "text/event-stream")
	hd.Set("Cache-Control", "no-store")
	hd.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	fmt.Fprint(w, "retry: 1000\n\n")
	var lastState []byte
	tick := time.NewTicker(keepAlive)
	defer tick.Stop()
	for {
		st, _ := json.Marshal(runState(run))
		if string(st) != string(lastState) {
			lastState = st
			fmt.Fprintf(w, "event: run\ndata: %s\n\n", st)
		}
		more := false
		for _, step := range run.Steps {
			off := offs[step.Index]
			if off >= step.LogSize {
				continue
			}
			chunk, err := h.b.ReadLog(ctx, s.Viewer, id, step.Index, off, min(step.LogSize, off+maxEvent))
			if err != nil {
				return
			}
			n := cut(chunk, step.Done)
			if n == 0 {
				continue
			}
			if off+int64(n) < step.LogSize {
				more = true
			}
			offs[step.Index] = off + int64(n)
			ev, _ := json.Marshal(h.newLogEvent(r, s, id, step.Index, off, chunk[:n]))
			fmt.Fprintf(w, "id: %s\nevent: log\ndata: %s\n\n", formatOffsets(run.Steps, offs), ev)
		}
		drained := true
		for _, step := range run.Steps {
			if offs[step.Index] < step.LogSize {
				drained = false
			}
		}
		if err := rc.Flush(); err != nil {
			return
		}
		if isFinal(run.State) && drained && !more {
			fmt.Fprint(w, "event: end\ndata: {}\n\n")
			_ = rc.Flush()
			return
		}
		if !more {
			select {
			case <-changed:
			case <-tick.C:
				if _, err := fmt.Fprint(w, ": keep-alive\n\n"); err != nil {
					return
				}
				_ = rc.Flush()
			case <-ctx.Done():
				return
			case <-h.b.Closing():
				return
			}
		}
		changed = h.b.RunChanged(id)
		if run, err = h.b.Run(ctx, s.Viewer, id); err != nil {
			return
		}
	}
}

func runState(run Run) stateEvent {
	// Text reaches the page's script shown escaped (api.VisibleText), as
	// the server-rendered page shows it.
	out := stateEvent{State: run.State, Reason: api.VisibleText(run.Reason), Message: api.VisibleText(run.Message),
		Duration: runDuration(run.Run), CanCancel: run.CanCancel, CanRerun: run.CanRerun, Steps: []stepState{}}
	for _, st := range run.Steps {
		out.Steps = append(out.Steps, stepState{Index: st.Index, Name: api.VisibleText(st.Name), State: st.State, Reason: api.VisibleText(st.Reason),
			ExitCode: st.ExitCode, Duration: stepDuration(st), Size: st.LogSize})
	}
	return out
}

// logPart answers an earlier part of a step's log as a logEvent: the
// whole lines in the LogTail bytes before "before".
func (h *Handler) logPart(w http.ResponseWriter, r *http.Request, s *Session) {
	id := runID(r)
	step, ok := stepParam(r)
	before, err := strconv.ParseInt(r.URL.Query().Get("before"), 10, 64)
	if id == 0 || !ok || err != nil || before < 0 {
		http.NotFound(w, r)
		return
	}
	from := max(before-h.cfg.LogTail, 0)
	if from > 0 {
		if from, err = h.lineAfter(r, s, id, step, from, before); err != nil {
			h.fail(w, r, s, err)
			return
		}
	}
	b, err := h.b.ReadLog(r.Context(), s.Viewer, id, step, from, before)
	if err != nil {
		h.fail(w, r, s, err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	json.NewEncoder(w).Encode(h.newLogEvent(r, s, id, step, from, b))
}
