package pipegraph

import (
	"fmt"
	"path"
	"slices"
	"strings"

	"knotless.dev/knotless/internal/api"
)

// Slot is one run of a group with its attempts, first to last: the last
// is the one that counts.
type Slot struct {
	Attempts []api.Run
}

// Current is the slot's latest attempt.
func (s Slot) Current() api.Run { return s.Attempts[len(s.Attempts)-1] }

// Group is the runs of one workflow file in a pipeline.
type Group struct {
	Path string // the workflow file, e.g. .knotless/workflows/test.yml
	// Name is the workflow's name without a run's matrix values.
	Name string
	// Matrix says the workflow has a matrix (its runs have values).
	Matrix bool
	// Slots are its runs (one per matrix combination), by first id.
	Slots []Slot
	// Needs are the names of the groups it needs, in order.
	Needs []string
	// Stage counts from 1: 1 + the highest stage of the groups it needs.
	Stage int
}

// Layout groups runs (one pipeline's, in any order) by workflow file,
// chains each run's attempts, and orders the groups by stage, then by
// their first run.
func Layout(runs []api.Run) []Group {
	runs = slices.Clone(runs)
	slices.SortFunc(runs, func(a, b api.Run) int { return int(a.ID - b.ID) })
	byID := map[int64]api.Run{}
	for _, r := range runs {
		byID[r.ID] = r
	}
	var groups []*Group
	index := map[string]*Group{}
	groupOf := map[int64]*Group{}
	for _, r := range runs {
		if _, isRetry := byID[r.RetryOf]; r.RetryOf != 0 && isRetry {
			continue // in the slot of its first attempt
		}
		g := index[r.WorkflowPath]
		if g == nil {
			g = &Group{Path: r.WorkflowPath, Name: baseName(r), Matrix: len(r.Matrix) > 0}
			index[r.WorkflowPath] = g
			groups = append(groups, g)
		}
		slot := Slot{Attempts: []api.Run{r}}
		for next, ok := byID[r.RetriedBy]; ok && r.RetriedBy != 0 && len(slot.Attempts) < len(runs); next, ok = byID[next.RetriedBy] {
			slot.Attempts = append(slot.Attempts, next)
			if next.RetriedBy == 0 {
				break
			}
		}
		for _, a := range slot.Attempts {
			groupOf[a.ID] = g
		}
		g.Slots = append(g.Slots, slot)
	}
	needs := map[*Group][]*Group{}
	for _, g := range groups {
		for _, s := range g.Slots {
			for _, n := range s.Current().Needs {
				if ng := groupOf[n.Run]; ng != nil && ng != g && !slices.Contains(needs[g], ng) {
					needs[g] = append(needs[g], ng)
					g.Needs = append(g.Needs, n.Name)
				}
			}
		}
	}
	var stage func(g *Group, depth int) int
	stage = func(g *Group, depth int) int {
		if g.Stage > 0 || depth > len(groups) {
			return max(g.Stage, 1)
		}
		s := 1
		for _, n := range needs[g] {
			s = max(s, stage(n, depth+1)+1)
		}
		g.Stage = s
		return s
	}
	out := make([]Group, 0, len(groups))
	for _, g := range groups {
		stage(g, 0)
	}
	for _, g := range groups {
		out = append(out, *g)
	}
	slices.SortStableFunc(out, func(a, b Group) int { return a.Stage - b.Stage })
	return out
}

// baseName is a run's workflow name without its matrix values: the name
// less the " (values)" the server added, else the file's name.
func baseName(r api.Run) string {
	if len(r.Matrix) == 0 {
		return r.Workflow
	}
	if s, ok := strings.CutSuffix(r.Workflow, " ("+Label(r)+")"); ok {
		return s
	}
	base := path.Base(r.WorkflowPath)
	return strings.TrimSuffix(base, path.Ext(base))
}

// Summary counts the group's current runs by state: "3 succeeded, 1
// failed".
func (g Group) Summary() string {
	counts := map[string]int{}
	var order []string
	for _, s := range g.Slots {
		st := s.Current().State
		if counts[st] == 0 {
			order = append(order, st)
		}
		counts[st]++
	}
	parts := make([]string, len(order))
	for i, st := range order {
		parts[i] = fmt.Sprintf("%d %s", counts[st], st)
	}
	return strings.Join(parts, ", ")
}

// State is the group's state for a badge: a plain workflow's run's; for
// a matrix, the first of failed, errored, cancelled, skipped, running,
// claimed, queued that a current run has, else succeeded.
func (g Group) State() string {
	if len(g.Slots) == 1 {
		return g.Slots[0].Current().State
	}
	for _, st := range []string{api.StateFailed, api.StateErrored, api.StateCancelled, api.StateSkipped,
		api.StateRunning, api.StateClaimed, api.StateQueued} {
		for _, s := range g.Slots {
			if s.Current().State == st {
				return st
			}
		}
	}
	return api.StateSucceeded
}

// Label is what a run's row in a group says of it: its matrix values
// ("linux, 1.26") for a matrix run, else its workflow name.
func Label(r api.Run) string {
	if len(r.Matrix) == 0 {
		return r.Workflow
	}
	vals := make([]string, len(r.Matrix))
	for i, v := range r.Matrix {
		vals[i] = v.Value
	}
	return strings.Join(vals, ", ")
}
