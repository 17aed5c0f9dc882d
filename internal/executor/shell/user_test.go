package shell

import (
	"strings"
	"testing"
)

// --user is refused, with what to do, when the runner is not root, and
// for root itself or a user that does not exist.
func TestLookupStepUser_RefusedForANonRootRunnerRootAndUnknownUsers(t *testing.T) {
	if _, err := LookupStepUser("nobody", 1000); err == nil || !strings.Contains(err.Error(), "not root") || !strings.Contains(err.Error(), "start it as root") {
		t.Errorf("non-root runner: %v", err)
	}
	if _, err := LookupStepUser("root", 0); err == nil || !strings.Contains(err.Error(), "unprivileged") {
		t.Errorf("root as the step user: %v", err)
	}
	if _, err := LookupStepUser("0", 0); err == nil || !strings.Contains(err.Error(), "unprivileged") {
		t.Errorf("UID 0 as the step user: %v", err)
	}
	if _, err := LookupStepUser("no-such-user-knotless", 0); err == nil || !strings.Contains(err.Error(), "no such user") {
		t.Errorf("unknown user: %v", err)
	}
	u, err := LookupStepUser("nobody", 0)
	if err != nil {
		t.Fatal(err)
	}
	if u.Name != "nobody" || u.UID == 0 || len(u.Groups) == 0 || u.Groups[0] != u.GID {
		t.Errorf("nobody: %+v", u)
	}
}
