package workflow

import "strings"

// Matches reports whether the workflow's `on:` section selects ev:
//
//   - EventPush to refs/heads/NAME: on.push is set and its branches are
//     nil (every branch) or one of them matches NAME;
//   - EventPush to refs/tags/NAME: on.push.tags is non-nil and one of its
//     patterns matches NAME (tags are never selected by default);
//   - EventManual: on.manual is set;
//   - EventPull: on.pull is set and its branches are nil or one matches the
//     target branch (ev.Ref as refs/heads/NAME, or a bare NAME);
//   - EventSchedule: on.schedule lists at least one time, whatever ev.Ref.
//     The server picks the workflow by its path (the schedule's row, kept
//     from the default branch's copy) and reads the file at that path on
//     the schedule's branch's tip: that copy must still have on.schedule,
//     else the due time starts no run and the schedule's problem says so.
//     Which entry fired is the server's to know, not this copy's.
//
// Any other event or ref matches nothing. A nil Workflow matches nothing.
func (w *Workflow) Matches(ev Event) bool {
	if w == nil {
		return false
	}
	switch ev.Kind {
	case EventPush:
		p := w.On.Push
		if p == nil {
			return false
		}
		if name, ok := strings.CutPrefix(ev.Ref, "refs/heads/"); ok && name != "" {
			return p.Branches == nil || matchAny(p.Branches, name)
		}
		if name, ok := strings.CutPrefix(ev.Ref, "refs/tags/"); ok && name != "" {
			return p.Tags != nil && matchAny(p.Tags, name)
		}
		return false
	case EventManual:
		return w.On.Manual
	case EventSchedule:
		return len(w.On.Schedule) > 0
	case EventPull:
		p := w.On.Pull
		if p == nil {
			return false
		}
		name := ev.Ref
		if rest, ok := strings.CutPrefix(name, "refs/heads/"); ok {
			name = rest
		} else if strings.HasPrefix(name, "refs/") {
			return false
		}
		if name == "" {
			return false
		}
		return p.Branches == nil || matchAny(p.Branches, name)
	}
	return false
}

func matchAny(patterns []string, name string) bool {
	for _, p := range patterns {
		if MatchGlob(p, name) {
			return true
		}
	}
	return false
}
