package workflow

import (
	"fmt"
	"strings"

	"github.com/goccy/go-yaml/ast"
)

// Concurrency is `concurrency:`, after GitHub Actions' key of that name: runs
// of one repository whose Group expands to the same text run one at a
// time, oldest first. With CancelInProgress a new run cancels the older
// runs of its group that are still queued or running instead of waiting
// for them.
type Concurrency struct {
	// Group is the group's template: text with {{ NAME }} parts, NAME one
	// of ConcurrencyVars.
	Group            string
	CancelInProgress bool
}

var concurrencyKeys = []string{"group", "cancel-in-progress"}

// ConcurrencyVars are the names a concurrency group may use, in the order
// messages list them.
var ConcurrencyVars = []string{"ref", "ref_name", "workflow", "event"}

// GroupFor expands the group for a run: ref is the full ref
// (refs/heads/main), workflow the workflow's name, event its event
// (push, manual, ...). ref_name is the ref without refs/heads/ or
// refs/tags/.
func (c *Concurrency) GroupFor(ref, workflow, event string) string {
	if c == nil {
		return ""
	}
	name := strings.TrimPrefix(strings.TrimPrefix(ref, "refs/heads/"), "refs/tags/")
	vals := map[string]string{"ref": ref, "ref_name": name, "workflow": workflow, "event": event}
	out, _ := expandGroup(c.Group, vals)
	return out
}

// expandGroup replaces each {{ NAME }} of tmpl by vals[NAME]; an unknown
// name, or a {{ without }}, is an error.
func expandGroup(tmpl string, vals map[string]string) (string, error) {
	var b strings.Builder
	rest := tmpl
	for {
		i := strings.Index(rest, "{{")
		if i < 0 {
			b.WriteString(rest)
			return b.String(), nil
		}
		b.WriteString(rest[:i])
		j := strings.Index(rest[i:], "}}")
		if j < 0 {
			return "", fmt.Errorf("%q has {{ without }}", tmpl)
		}
		name := strings.TrimSpace(rest[i+2 : i+j])
		v, ok := vals[name]
		if !ok {
			return "", fmt.Errorf("unknown name %q in {{ }}; use one of: %s (as in {{ workflow }}-{{ ref }})", name, strings.Join(ConcurrencyVars, ", "))
		}
		b.WriteString(v)
		rest = rest[i+j+2:]
	}
}

// concurrency reads `concurrency:`: a group (a string) or a mapping with
// group and cancel-in-progress.
func (d *decoder) concurrency(e entry) *Concurrency {
	if isNull(e.val) {
		d.errorf(e.kpos, "concurrency is empty; write a group, e.g. concurrency: {group: \"{{ workflow }}-{{ ref }}\", cancel-in-progress: true}")
		return nil
	}
	c := &Concurrency{}
	groupAt := e
	if _, isMap := e.val.(*ast.MappingNode); !isMap {
		if _, isMap := e.val.(*ast.MappingValueNode); !isMap {
			s, ok := d.text(e, "concurrency group")
			if !ok {
				return nil
			}
			c.Group = s
		}
	}
	if c.Group == "" {
		es, ok := d.entries(e.val, e.vpos(), "concurrency")
		if !ok {
			return nil
		}
		for _, x := range es {
			switch x.key {
			case "group":
				if s, ok := d.text(x, "concurrency group"); ok {
					c.Group, groupAt = s, x
				}
			case "cancel-in-progress":
				if b, ok := d.boolean(x, "concurrency cancel-in-progress"); ok {
					c.CancelInProgress = b
				}
			default:
				d.unknownKey(x, "concurrency", concurrencyKeys)
			}
		}
		if c.Group == "" {
			d.errorf(e.vpos(), "concurrency has no group: write group: \"{{ workflow }}-{{ ref }}\"")
			return nil
		}
	}
	vals := map[string]string{}
	for _, n := range ConcurrencyVars {
		vals[n] = ""
	}
	if _, err := expandGroup(c.Group, vals); err != nil {
		d.errorf(groupAt.vpos(), "concurrency group: %v", err)
		return nil
	}
	return c
}
