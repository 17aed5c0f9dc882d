package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"knotless.dev/knotless/internal/api"
)

// writeJSON prints v as indented JSON followed by a newline.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return fmt.Errorf("print JSON: %w", err)
	}
	return nil
}

// table prints aligned columns; rows are added with row and flushed with
// flush.
type table struct{ tw *tabwriter.Writer }

func newTable(w io.Writer, headers ...string) *table {
	t := &table{tw: tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)}
	t.row(headers...)
	return t
}

func (t *table) row(cells ...string) {
	for i, c := range cells {
		if c == "" {
			cells[i] = "-"
		}
		// A cell is text for people, on a terminal or not: a character
		// that is not shown for what it is (a tab or a newline would also
		// break the columns) is shown escaped (api.VisibleText).
		cells[i] = api.VisibleText(cells[i])
	}
	fmt.Fprintln(t.tw, strings.Join(cells, "\t"))
}

func (t *table) flush() error { return t.tw.Flush() }

// ago renders t relative to now, compactly: "just now", "42s ago",
// "5m ago", "3h ago", "6d ago", then the date ("2006-01-02"). The zero time
// is "".
func ago(t, now time.Time) string {
	if t.IsZero() {
		return ""
	}
	d := now.Sub(t)
	switch {
	case d < 0:
		return t.Local().Format("2006-01-02 15:04")
	case d < 5*time.Second:
		return "just now"
	case d < time.Minute:
		return fmt.Sprintf("%ds ago", int(d/time.Second))
	case d < time.Hour:
		return fmt.Sprintf("%dm ago", int(d/time.Minute))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh ago", int(d/time.Hour))
	case d < 30*24*time.Hour:
		return fmt.Sprintf("%dd ago", int(d/(24*time.Hour)))
	}
	return t.Local().Format("2006-01-02")
}

// agoPtr is ago for optional times.
func agoPtr(t *time.Time, now time.Time) string {
	if t == nil {
		return ""
	}
	return ago(*t, now)
}

// compact renders a duration in at most two units: "850ms", "12s",
// "1m23s", "2h05m", "3d04h".
func compact(d time.Duration) string {
	switch {
	case d < 0:
		return ""
	case d < time.Second:
		return fmt.Sprintf("%dms", d.Milliseconds())
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Round(time.Second)/time.Second))
	case d < time.Hour:
		d = d.Round(time.Second)
		return fmt.Sprintf("%dm%02ds", int(d/time.Minute), int(d%time.Minute/time.Second))
	case d < 24*time.Hour:
		d = d.Round(time.Minute)
		return fmt.Sprintf("%dh%02dm", int(d/time.Hour), int(d%time.Hour/time.Minute))
	}
	d = d.Round(time.Hour)
	return fmt.Sprintf("%dd%02dh", int(d/(24*time.Hour)), int(d%(24*time.Hour)/time.Hour))
}

// runDuration is how long a run took, or has been running ("…" appended).
func runDuration(r api.Run, now time.Time) string {
	if r.StartedAt == nil {
		return ""
	}
	if r.FinishedAt != nil {
		return compact(r.FinishedAt.Sub(*r.StartedAt))
	}
	if api.IsFinal(r.State) {
		return ""
	}
	return compact(now.Sub(*r.StartedAt)) + "…"
}

// stepTimes renders a step's start and end as clock times (local,
// "15:04:05.000", with the date when it is not today's) and how long it
// ran (compact; "…" appended while it runs). Unknown ones are "".
func stepTimes(st api.Step, now time.Time) (started, ended, took string) {
	clock := func(t *time.Time) string {
		if t == nil {
			return ""
		}
		l := t.Local()
		if y, m, d := l.Date(); y == now.Local().Year() && m == now.Local().Month() && d == now.Local().Day() {
			return l.Format("15:04:05.000")
		}
		return l.Format("2006-01-02 15:04:05.000")
	}
	started, ended = clock(st.StartedAt), clock(st.FinishedAt)
	switch {
	case st.DurationMS != nil:
		took = stepCompact(time.Duration(*st.DurationMS) * time.Millisecond)
	case st.StartedAt != nil && st.FinishedAt == nil && st.State == api.StepRunning:
		took = compact(now.Sub(*st.StartedAt)) + "…"
	}
	return started, ended, took
}

// stepCompact renders a step's duration as its log footer does under a
// minute ("1.53s", "40ms"), compact above.
func stepCompact(d time.Duration) string {
	if d < time.Minute {
		return d.Round(10 * time.Millisecond).String()
	}
	return compact(d)
}

// shortRef strips refs/heads/ and refs/tags/ from a ref.
func shortRef(ref string) string {
	if s, ok := strings.CutPrefix(ref, "refs/heads/"); ok {
		return s
	}
	if s, ok := strings.CutPrefix(ref, "refs/tags/"); ok {
		return s
	}
	return ref
}

// shortSHA is the first 7 hex digits of a commit id.
func shortSHA(sha string) string {
	if len(sha) > 7 {
		return sha[:7]
	}
	return sha
}

// stateText is a run's or step's state with its reason when it did not
// succeed and says more than the state, e.g. "failed (timeout)", but
// "cancelled", not "cancelled (cancelled)".
func stateText(state, reason string) string {
	if reason == "" || reason == state || state == api.StateSucceeded {
		return state
	}
	return state + " (" + reason + ")"
}

// exitText renders an optional exit code.
func exitText(code *int) string {
	if code == nil {
		return ""
	}
	return fmt.Sprint(*code)
}

// size renders a byte count compactly: "0 B", "512 B", "1.5 KiB", "3.2 MiB".
func size(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
