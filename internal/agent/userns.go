package agent

import (
	"fmt"
	"strconv"
	"strings"
)

// UIDRange is one line of a user namespace's uid_map
// (user_namespaces(7)): Length uids from Inside, in the namespace, are
// uids from Outside in its parent namespace.
type UIDRange struct {
	Inside, Outside, Length uint64
}

// ParseUIDMap reads the text of /proc/PID/uid_map: one range per line, three
// decimal fields each. Errors: a line of another shape, or no line.
func ParseUIDMap(text string) ([]UIDRange, error) {
	var out []UIDRange
	for line := range strings.Lines(text) {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if len(f) != 3 {
			return nil, fmt.Errorf("uid_map line %q: want three fields", strings.TrimSpace(line))
		}
		var r [3]uint64
		for i, s := range f {
			n, err := strconv.ParseUint(s, 10, 64)
			if err != nil {
				return nil, fmt.Errorf("uid_map line %q: %v", strings.TrimSpace(line), err)
			}
			r[i] = n
		}
		out = append(out, UIDRange{Inside: r[0], Outside: r[1], Length: r[2]})
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("uid_map %q: no range", text)
	}
	return out, nil
}

// UIDMapRemapped reports whether the uid_map text (as
// AgentHello.UIDMap carries it) puts the process in a user namespace of
// its own whose uids are none of the parent's privileged ones: it parses,
// and no range maps onto the parent's uid 0. The initial namespace's
// identity map ("0 0 4294967295"), an empty or unreadable map, and a map
// that gives any uid the parent's root all report false.
func UIDMapRemapped(text string) bool {
	ranges, err := ParseUIDMap(text)
	if err != nil {
		return false
	}
	for _, r := range ranges {
		if r.Outside == 0 || r.Length == 0 {
			return false
		}
	}
	return true
}

// DescribeUIDMap says what a uid_map maps, for a setup log:
// "uids 0-65535 -> host 1234567-1300102" (ranges joined by ", "), "the
// node's own uids (uid_map 0 0 4294967295)" for the identity, or the
// text as it is when it does not parse.
func DescribeUIDMap(text string) string {
	ranges, err := ParseUIDMap(text)
	if err != nil {
		return fmt.Sprintf("unreadable uid_map %q", strings.TrimSpace(text))
	}
	if !UIDMapRemapped(text) {
		return "the node's own uids (uid_map " + strings.Join(strings.Fields(text), " ") + ")"
	}
	parts := make([]string, len(ranges))
	for i, r := range ranges {
		parts[i] = fmt.Sprintf("uids %d-%d -> host %d-%d", r.Inside, r.Inside+r.Length-1, r.Outside, r.Outside+r.Length-1)
	}
	return strings.Join(parts, ", ")
}
