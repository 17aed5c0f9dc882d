package server_test

import (
	"path/filepath"
	"strings"
	"testing"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/server/servertest"
)

// fetchBySHA fetches sha from the fixture's repository with token into a
// fresh bare repository, as the given protocol version, and returns git's
// output and error.
func fetchBySHA(t *testing.T, f *fixture, token, sha, version string) (string, error) {
	t.Helper()
	bare := filepath.Join(t.TempDir(), "bare")
	servertest.Git(t, "", "init", "-q", "--bare", bare)
	return servertest.GitErr(t, bare, "-c", "protocol.version="+version, "fetch", "-q", f.GitURL(f.repo, token), sha+":refs/x")
}

// TestGit_CommitNoRefReachesIsNotServedButAQueuedRunsCommitIs pins item
// 10: a commit of a deleted branch (a secret committed, then taken back)
// is fetched by SHA by nobody, neither a run token nor the owner, over
// protocol v0 or v2; the commit of a run still queued, force-pushed away
// from its branch, is fetched while the run is not final, and no longer
// once it ended. The hidden refs that hold such commits are neither listed
// nor pushable.
func TestGit_CommitNoRefReachesIsNotServedButAQueuedRunsCommitIs(t *testing.T) {
	t.Parallel()
	f := newFixture(t, servertest.Options{})
	wf := "on:\n  push:\n    branches: [main]\nsteps:\n  - run: echo hello\n"
	work := servertest.WorkTree(t, map[string]string{".knotless/workflows/ci.yml": wf, "README": "one\n"})
	queuedSHA := servertest.Git(t, work, "rev-parse", "HEAD")
	f.push(t, work, "main") // pipeline 1: a run of queuedSHA

	servertest.Git(t, work, "checkout", "-q", "-b", "leak")
	secretSHA := servertest.Commit(t, work, map[string]string{"secret.txt": "hunter2\n"}, "oops")
	f.push(t, work, "leak")  // no pipeline: the workflow runs for main only
	f.push(t, work, ":leak") // the branch is deleted

	servertest.Git(t, work, "checkout", "-q", "--orphan", "rewrite", "main")
	servertest.Commit(t, work, map[string]string{"README": "rewritten\n"}, "rewritten")
	f.push(t, work, "+rewrite:main") // pipeline 2; queuedSHA is on no branch now

	r := f.RegisterRunner(t, f.repo, "r1", nil, true)
	c1 := claim(t, r, 0)
	c2 := claim(t, r, 0)
	if c1 == nil || c2 == nil || c1.Run.SHA != queuedSHA {
		t.Fatalf("claims: %+v, %+v; want the run of %s first", c1, c2, queuedSHA)
	}

	for _, v := range []string{"0", "2"} {
		for who, tok := range map[string]string{"run token": c1.RunToken, "owner": f.token, "admin": f.AdminToken} {
			if out, err := fetchBySHA(t, f, tok, secretSHA, v); err == nil {
				t.Errorf("protocol %s: the %s fetched %s, a deleted branch's commit:\n%s", v, who, secretSHA, out)
			}
		}
		for who, tok := range map[string]string{"run token": c1.RunToken, "owner": f.token} {
			if out, err := fetchBySHA(t, f, tok, queuedSHA, v); err != nil {
				t.Errorf("protocol %s: the %s cannot fetch %s, the commit of a run not yet final: %v\n%s", v, who, queuedSHA, err, out)
			}
		}
	}
	refs := servertest.Git(t, "", "ls-remote", f.GitURL(f.repo, f.token))
	if strings.Contains(refs, "refs/knotless") || strings.Contains(refs, queuedSHA) {
		t.Errorf("ls-remote shows hidden refs:\n%s", refs)
	}
	if out, err := servertest.GitErr(t, work, "push", f.GitURL(f.repo, f.token), "rewrite:refs/knotless/pipelines/99"); err == nil {
		t.Errorf("a push to a hidden ref succeeded:\n%s", out)
	}

	procedure(t, r, api.MethodComplete, api.CompleteInput{Run: c1.Run.ID, State: api.StateSucceeded}, nil)
	for _, v := range []string{"0", "2"} {
		for who, tok := range map[string]string{"the other run's token": c2.RunToken, "owner": f.token} {
			if out, err := fetchBySHA(t, f, tok, queuedSHA, v); err == nil {
				t.Errorf("protocol %s: %s fetched %s after its last run ended:\n%s", v, who, queuedSHA, out)
			}
		}
	}
	// The other pipeline's commit is its branch's: fetched by SHA while
	// and after its run.
	if out, err := fetchBySHA(t, f, c2.RunToken, c2.Run.SHA, "0"); err != nil {
		t.Errorf("the run token cannot fetch its run's commit: %v\n%s", err, out)
	}
	procedure(t, r, api.MethodComplete, api.CompleteInput{Run: c2.Run.ID, State: api.StateSucceeded}, nil)
	if out, err := fetchBySHA(t, f, f.token, c2.Run.SHA, "0"); err != nil {
		t.Errorf("the owner cannot fetch the branch's commit: %v\n%s", err, out)
	}
}
