package runner

import (
	"path/filepath"
	"testing"
)

func TestWorkspaces_SecondConcurrentRunOfAWorkflowGetsTheNextSlot(t *testing.T) {
	w := &workspaces{root: "/work/workspaces"}
	a := w.take("alice/app", ".knotless/workflows/ci.yml")
	b := w.take("alice/app", ".knotless/workflows/ci.yml")
	other := w.take("alice/app", ".knotless/workflows/lint.yaml")
	if a != "/work/workspaces/alice/app/ci/0" || b != "/work/workspaces/alice/app/ci/1" || other != "/work/workspaces/alice/app/lint/0" {
		t.Fatalf("slots: %s, %s, %s", a, b, other)
	}
	w.release(a)
	if again := w.take("alice/app", ".knotless/workflows/ci.yml"); again != a {
		t.Errorf("after release, the next run got %s, want the stable %s", again, a)
	}
	// A path held for a takeover is not handed out.
	w.release(b)
	w.hold(b)
	if c := w.take("alice/app", ".knotless/workflows/ci.yml"); c != "/work/workspaces/alice/app/ci/2" {
		t.Errorf("with slots 0 and 1 taken: %s", c)
	}
}

func TestWorkspaces_NamesThatAreNotTheServersStayInside(t *testing.T) {
	w := &workspaces{root: "/w"}
	for _, tc := range []struct{ repo, wf string }{
		{"../..", "../../x.yml"}, {"a/..", ".."}, {"a/b", "c d\n.yml"}, {"a/b", "/"}, {"a", "x.yml"}, {"a/b/c", "x.yml"},
	} {
		p := w.take(tc.repo, tc.wf)
		rel, err := filepath.Rel("/w", p)
		if err != nil || !filepath.IsLocal(rel) || len(filepath.SplitList(rel)) != 1 {
			t.Errorf("%q %q: workspace %s leaves /w", tc.repo, tc.wf, p)
		}
		if d, _ := filepath.Rel("/w", filepath.Dir(filepath.Dir(filepath.Dir(p)))); d == ".." || filepath.Dir(filepath.Dir(filepath.Dir(filepath.Dir(p)))) != "/w" {
			t.Errorf("%q %q: workspace %s is not four levels below /w", tc.repo, tc.wf, p)
		}
	}
}
