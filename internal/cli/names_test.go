package cli

import (
	"strings"
	"testing"

	"knotless.dev/knotless/internal/api"
)

// The CLI refuses, before any request, the names the server refuses (issue
// 14, item 11: one rule for names, api.CheckName).
func TestNames_RefusedByTheServersRuleBeforeAnyRequest(t *testing.T) {
	e := isolatedEnv(t)
	for _, args := range [][]string{
		{"repo", "create", "../escape"},
		{"repo", "create", "alice/.x"},
		{"repo", "create", ".."},
		{"account", "create", ".."},
		{"account", "create", "--", "-x"},
		{"run", "list", "--repo", "../x"},
		{"runner", "list", "--repo", "alice/../x"},
	} {
		r := runCLI(t, e, "", nil, args...)
		if r.code != ExitUsage || !strings.Contains(r.stderr, api.NameRule) {
			t.Errorf("%q: exit %d, stderr %q; want %d stating the name rule", args, r.code, r.stderr, ExitUsage)
		}
	}
}
