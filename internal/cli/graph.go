package cli

import (
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/pipegraph"
)

// printGraph prints one pipeline's runs as their graph (pipegraph): a row
// per run, by stage; a matrix's runs under a row for their workflow, and a
// retried run's later attempts under it.
func (s *session) printGraph(w io.Writer, runs []api.Run) error {
	if len(runs) == 0 {
		return nil
	}
	now := s.now()
	first := runs[0]
	fmt.Fprintf(w, "Pipeline %d: %s at %s (%s)\n\n", first.Pipeline, api.VisibleText(shortRef(first.Ref)), shortSHA(first.SHA), first.Event)
	t := newTable(w, "STAGE", "RUN", "WORKFLOW", "STATE", "ATTEMPT", "NEEDS", "DURATION")
	for _, g := range pipegraph.Layout(runs) {
		stage := strconv.Itoa(g.Stage)
		needs := strings.Join(g.Needs, ", ")
		indent := ""
		if g.Matrix {
			t.row(stage, "", g.Name+fmt.Sprintf(" (matrix, %d runs)", len(g.Slots)), g.Summary(), "", needs, "")
			indent, needs = "  ", ""
		}
		for _, slot := range g.Slots {
			for i, r := range slot.Attempts {
				name := indent + pipegraph.Label(r)
				if i > 0 {
					name = indent + "  ↻ " + pipegraph.Label(r)
				}
				attempt := ""
				if len(slot.Attempts) > 1 {
					attempt = fmt.Sprintf("%d of %d", i+1, len(slot.Attempts))
				}
				t.row(stage, strconv.FormatInt(r.ID, 10), name, stateText(r.State, r.Reason), attempt, needs, runDuration(r, now))
			}
		}
	}
	if err := t.flush(); err != nil {
		return err
	}
	printPipelineNotes(w, runs)
	return nil
}

// graphRows adds what run show says of r's place in its pipeline: its
// matrix values, the runs it needs, its attempts, its exported values.
func (s *session) graphRows(kv *table, r api.Run) {
	if len(r.Matrix) > 0 {
		vals := make([]string, len(r.Matrix))
		for i, v := range r.Matrix {
			vals[i] = v.Name + "=" + v.Value
		}
		kv.row("Matrix:", strings.Join(vals, ", "))
	}
	if len(r.Needs) > 0 {
		needs := make([]string, len(r.Needs))
		for i, n := range r.Needs {
			needs[i] = fmt.Sprintf("run %d (%s)", n.Run, n.Name)
		}
		kv.row("Needs:", strings.Join(needs, ", "))
	}
	if r.Attempt > 1 || r.RetriedBy != 0 {
		a := fmt.Sprintf("%d", max(r.Attempt, 1))
		if r.RetryOf != 0 {
			a += fmt.Sprintf(", a retry of run %d", r.RetryOf)
		}
		if r.RetriedBy != 0 {
			a += fmt.Sprintf("; retried as run %d", r.RetriedBy)
		}
		kv.row("Attempt:", a)
	}
	if r.NotRetried != "" {
		kv.row("Not retried:", r.NotRetried)
	}
	if len(r.Exports) > 0 {
		names := make([]string, 0, len(r.Exports))
		for k := range r.Exports {
			names = append(names, k+"="+r.Exports[k])
		}
		sort.Strings(names)
		kv.row("Exports:", strings.Join(names, ", "))
	}
}

// attemptText marks a retry in a list of runs: " [attempt 2]".
func attemptText(r api.Run) string {
	if r.Attempt > 1 {
		return fmt.Sprintf(" [attempt %d]", r.Attempt)
	}
	return ""
}
