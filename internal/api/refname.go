package api

import (
	"strconv"
	"strings"
)

// Ref types, as KNOTLESS_REF_TYPE gives them.
const (
	RefBranch = "branch"
	RefTag    = "tag"
)

// RefName splits a full ref into its short name and type: refs/heads/main
// is ("main", RefBranch), refs/tags/v1 is ("v1", RefTag); any other ref is
// itself with type "".
func RefName(ref string) (name, typ string) {
	if s, ok := strings.CutPrefix(ref, "refs/heads/"); ok {
		return s, RefBranch
	}
	if s, ok := strings.CutPrefix(ref, "refs/tags/"); ok {
		return s, RefTag
	}
	return ref, ""
}

// RunPath is the path of a run's page in the server's web view, relative
// to the server's URL: /-/runs/ID (KNOTLESS_RUN_URL).
func RunPath(run int64) string {
	return "/-/runs/" + strconv.FormatInt(run, 10)
}
