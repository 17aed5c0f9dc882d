package agent

import "testing"

// TestUIDMap_RemappedOnlyWhenNoUIDIsTheParentsRoot pins how a job pod's
// user namespace is judged from the agent's /proc/self/uid_map (issue 34):
// the node's identity map, an empty or unreadable one, and any map that
// gives some uid the parent's root are not a namespace of the pod's own;
// the kubelet's ranges (65536 uids from a multiple of 65536) are. The maps
// are those the kernel prints (user_namespaces(7)), with its padding.
func TestUIDMap_RemappedOnlyWhenNoUIDIsTheParentsRoot(t *testing.T) {
	for _, c := range []struct {
		text     string
		remapped bool
		desc     string
	}{
		{"         0 2143551488      65536\n", true, "uids 0-65535 -> host 2143551488-2143617023"},
		{"0 100000 1000\n1000 200000 1\n", true, "uids 0-999 -> host 100000-100999, uids 1000-1000 -> host 200000-200000"},
		{"         0          0 4294967295\n", false, "the node's own uids (uid_map 0 0 4294967295)"},
		{"0 0 1\n1 100000 65535\n", false, "the node's own uids (uid_map 0 0 1 1 100000 65535)"},
		{"1000 0 1\n", false, "the node's own uids (uid_map 1000 0 1)"},
		{"", false, `unreadable uid_map ""`},
		{"0 100000\n", false, `unreadable uid_map "0 100000"`},
	} {
		if got := UIDMapRemapped(c.text); got != c.remapped {
			t.Errorf("UIDMapRemapped(%q) = %v, want %v", c.text, got, c.remapped)
		}
		if got := DescribeUIDMap(c.text); got != c.desc {
			t.Errorf("DescribeUIDMap(%q) = %q, want %q", c.text, got, c.desc)
		}
	}
}
