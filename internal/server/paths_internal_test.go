package server

import (
	"path/filepath"
	"strings"
	"testing"
)

func TestInside_JoinedPathsNeverLeaveTheRoot(t *testing.T) {
	root := "/data/repos"
	for _, elems := range [][]string{{".."}, {"..", "x"}, {"a", "..", ".."}, {"/etc"}, {""}, {"."}, {"a/../../b"}} {
		if p, err := inside(root, elems...); err == nil {
			t.Errorf("inside(%q) = %s, want an error", elems, p)
		}
	}
	p, err := inside(root, "alice", "app.git")
	if err != nil || p != filepath.Join(root, "alice", "app.git") {
		t.Errorf("inside(alice, app.git) = %s, %v", p, err)
	}
	s := &Server{cfg: Config{DataDir: "/data"}}
	if _, err := s.repoPath("..", "escape"); err == nil {
		t.Error("repoPath(.., escape) = nil error")
	}
	if _, err := s.repoPath("alice", "../../x"); err == nil || !strings.Contains(err.Error(), "repository name") {
		t.Errorf("repoPath(alice, ../../x) = %v, want the name rule's error", err)
	}
}

func TestGitPath_DecodedPartsFollowTheNameRuleAndServicesOnly(t *testing.T) {
	for p, want := range map[string]bool{
		"/alice/app.git/info/refs":            true,
		"/alice/app.git/git-upload-pack":      true,
		"/alice/app.git/git-receive-pack":     true,
		"/../app.git/info/refs":               false,
		"/alice/...git/info/refs":             false,
		"/alice/app.git/../../x":              false,
		"/alice/app.git/HEAD":                 false,
		"/alice/app.git":                      false,
		"/alice/app.git/":                     false,
		"/.alice/app.git/info/refs":           false,
		"/alice/app.git.git/info/refs":        false,
		"/alice/app.git/info/refs/../../conf": false,
	} {
		if _, _, _, ok := gitPath(p); ok != want {
			t.Errorf("gitPath(%q) ok = %v, want %v", p, ok, want)
		}
	}
}
