package workflow

import (
	"fmt"
	"strings"
	"time"

	"github.com/goccy/go-yaml/ast"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/schedule"
)

// scheduleKeys are the keys of one `on.schedule` entry.
var scheduleKeys = []string{"cron", "timezone", "branch"}

// scheduleExample is how messages show an entry.
const scheduleExample = `[{cron: "0 3 * * *"}]`

// schedules reads `on.schedule`: a non-empty list of mappings, each with
// cron (required: five fields or an @daily-style name, schedule.Parse),
// timezone (an IANA name, default UTC) and branch (a branch name without
// refs/heads/, default the repository's default branch). An expression is
// reported at its value, a zone at its own; an entry the same as an
// earlier one (cron, zone and branch) is reported at the later one.
func (d *decoder) schedules(e entry) []ScheduleTrigger {
	if isNull(e.val) {
		d.errorf(e.kpos, "on.schedule lists no times; add one, like schedule: %s", scheduleExample)
		return nil
	}
	nodes, ps, ok := d.list(e.val, e.vpos(), "on.schedule", scheduleExample)
	if !ok {
		return nil
	}
	if len(nodes) == 0 {
		d.errorf(e.vpos(), "on.schedule lists no times; add one, like schedule: %s", scheduleExample)
		return nil
	}
	var out []ScheduleTrigger
	type first struct {
		n int
		p pos
	}
	seen := map[ScheduleTrigger]first{}
	now := time.Now()
	for i, n := range nodes {
		s, ok := d.scheduleEntry(n, ps[i], fmt.Sprintf("schedule %d", i+1), now)
		if !ok {
			continue
		}
		k := ScheduleTrigger{Cron: s.Cron, TimeZone: s.TimeZone, Branch: s.Branch}
		if f, dup := seen[k]; dup {
			d.errorf(ps[i], "schedule %d is the same as schedule %d (at %s): the same cron, timezone and branch; remove one", i+1, f.n, f.p)
			continue
		}
		seen[k] = first{i + 1, ps[i]}
		out = append(out, s)
	}
	return out
}

// scheduleEntry reads one entry of `on.schedule` (n, at p), named where in
// messages; ok is false when it has an error.
func (d *decoder) scheduleEntry(n ast.Node, p pos, where string, now time.Time) (ScheduleTrigger, bool) {
	s := ScheduleTrigger{TimeZone: "UTC", Line: p.line, Column: p.col}
	if text, isText := n.(*ast.StringNode); isText {
		d.errorf(p, "%s must be a mapping with cron:; write - cron: %q", where, text.Value)
		return s, false
	}
	es, ok := d.entries(n, p, where)
	if !ok {
		return s, false
	}
	var cron *entry
	ok, zoneOK := true, true
	for i, x := range es {
		switch x.key {
		case "cron":
			cron = &es[i]
		case "timezone":
			z, good := d.word(x, where+" timezone")
			if good {
				if _, err := schedule.Zone(z); err != nil {
					d.errorf(x.vpos(), "%s %v", where, err)
					good = false
				}
			}
			if s.TimeZone, zoneOK = z, good; !good {
				ok = false
			}
		case "branch":
			b, good := d.scheduleBranch(x, where)
			s.Branch, ok = b, ok && good
		default:
			d.unknownKey(x, where, scheduleKeys)
			ok = false
		}
	}
	if cron == nil {
		d.errorf(p, "%s has no cron:; write the times as five fields (minute hour day-of-month month day-of-week), like cron: \"0 3 * * *\"", where)
		return s, false
	}
	before := len(d.errs)
	expr, good := d.text(*cron, where+" cron")
	if !good || len(d.errs) > before { // a matrix value: said there
		return s, false
	}
	s.Cron = strings.TrimSpace(expr)
	zone := s.TimeZone
	if !zoneOK {
		zone = "UTC" // the zone's error is said at its value; check the rest
	}
	if _, err := schedule.Parse(s.Cron, zone, now); err != nil {
		d.errorf(cron.vpos(), "%s cron: %v", where, err)
		return s, false
	}
	return s, ok
}

// scheduleBranch reads an entry's branch: one branch by its name, without
// refs/heads/ (like the patterns of on.push), that git could name
// (check-ref-format, api.CheckTriggerRef): not a pattern.
func (d *decoder) scheduleBranch(x entry, where string) (string, bool) {
	b, ok := d.word(x, where+" branch")
	if !ok {
		return "", false
	}
	if strings.HasPrefix(b, "refs/") {
		d.errorf(x.vpos(), "%s branch names the branch without its prefix: write %q, not %q", where, strings.TrimPrefix(b, "refs/heads/"), b)
		return "", false
	}
	if api.CheckTriggerRef(b) != nil {
		d.errorf(x.vpos(), "%s branch %q is not a branch name (git check-ref-format: no space, ~ ^ : ? * [ \\, \"..\" or \"@{\", no part starting with . or ending in .lock); name one branch, not a pattern", where, b)
		return "", false
	}
	return b, true
}
