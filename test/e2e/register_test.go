package e2e

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Through the real programs: knotless-run login without a registration
// token, with a used one, and for a repository that does not exist, is
// refused without telling whether the repository exists; with a token the
// owner made with knotless runner token it registers (registerRunner).
func TestE2E_LoginNeedsARegistrationTokenFromAnOwner(t *testing.T) {
	t.Parallel()
	w := newWorld(t, 5*time.Second)
	login := func(repo, name, token string) (int, string) {
		cmd := exec.Command(runnerBin(), "login", "--server", w.url, "--repo", repo, "--name", name,
			"--state", filepath.Join(w.root, name+".json"))
		cmd.Env = baseEnv(w.home)
		if token != "" {
			cmd.Env = append(cmd.Env, "KNOTLESS_REGISTRATION_TOKEN="+token)
		}
		out, err := cmd.CombinedOutput()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return code, string(out)
	}
	if code, out := login(w.repo, "r0", ""); code != 2 || !strings.Contains(out, "knotless runner token --repo "+w.repo) {
		t.Errorf("login without a token: exit %d, want 2 naming knotless runner token:\n%s", code, out)
	}
	token := strings.TrimSpace(w.cliOK("", "runner", "token", "--repo", w.repo))
	if code, out := login(w.repo, "r1", token); code != 0 {
		t.Fatalf("login with the owner's token: exit %d:\n%s", code, out)
	}
	used, usedOut := login(w.repo, "r2", token)
	ghost, ghostOut := login("admin/ghost", "r2", token)
	if used != 1 || ghost != 1 || !strings.Contains(usedOut, "needs a registration token from an owner") ||
		strings.ReplaceAll(ghostOut, "admin/ghost", w.repo) != usedOut {
		t.Errorf("used token: exit %d:\n%s\nmissing repository: exit %d:\n%s\nwant exit 1 and the same answer", used, usedOut, ghost, ghostOut)
	}
	if list := w.cliOK("", "runner", "list", "--repo", w.repo); !strings.Contains(list, "r1") || strings.Contains(list, "r2") {
		t.Errorf("runner list:\n%s", list)
	}
}
