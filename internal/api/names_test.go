package api

import (
	"strings"
	"testing"
)

func TestCheckName_OneRuleForHandlesAndRepositoryNames(t *testing.T) {
	for _, ok := range []string{"a", "A1", "app", "a.b", "a-b_c", "x..y", "0", strings.Repeat("a", MaxNameLength)} {
		if err := CheckName("name", ok); err != nil {
			t.Errorf("CheckName(%q) = %v, want nil", ok, err)
		}
	}
	for _, bad := range []string{"", ".", "..", ".x", "-x", "_x", "a/b", "a\\b", "a b", "x.git", "x.GIT", "é",
		"a%2e", "a\x00", strings.Repeat("a", MaxNameLength+1)} {
		if err := CheckName("name", bad); err == nil || !strings.Contains(err.Error(), NameRule) {
			t.Errorf("CheckName(%q) = %v, want an error stating the rule", bad, err)
		}
	}
	if err := CheckHandle("Alice"); err == nil {
		t.Error("CheckHandle(Alice) = nil, want lowercase only")
	}
	for _, bad := range []string{"../x", "alice", "alice/..", "alice/a/b", "Alice/app", "/app", "alice/"} {
		if err := CheckRepo(bad); err == nil {
			t.Errorf("CheckRepo(%q) = nil, want an error", bad)
		}
	}
	if err := CheckRepo("alice/app.v2"); err != nil {
		t.Errorf("CheckRepo(alice/app.v2) = %v", err)
	}
}
