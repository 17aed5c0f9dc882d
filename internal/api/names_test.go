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

// TestCheckRunnerName_NamesTheServerTakesTheRunnerAndCLITakeToo pins issue
// 11 item 5 for runners: names like "-dash", ".hidden" or "_under" (an
// option to a command, a hidden file) are refused by the one rule, as for
// repositories, and so is a name longer than a label value.
func TestCheckRunnerName_NamesTheServerTakesTheRunnerAndCLITakeToo(t *testing.T) {
	for _, bad := range []string{"-dash", ".hidden", "_under", ".", "..", "", "a/b", "x.git", strings.Repeat("a", 64)} {
		if err := CheckRunnerName("runner name", bad); err == nil {
			t.Errorf("CheckRunnerName(%q) accepted it", bad)
		}
	}
	for _, good := range []string{"builder-1", "k8s.ci", "A_b", strings.Repeat("a", 63)} {
		if err := CheckRunnerName("runner name", good); err != nil {
			t.Errorf("CheckRunnerName(%q): %v", good, err)
		}
	}
}
