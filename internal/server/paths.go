package server

import (
	"fmt"
	"path/filepath"
	"strings"

	"knotless.dev/knotless/internal/api"
)

// gitServices are the REST parts of /OWNER/NAME.git/REST the server serves:
// git's smart HTTP protocol, nothing else (no dumb-HTTP file access).
var gitServices = map[string]bool{"/info/refs": true, "/git-upload-pack": true, "/git-receive-pack": true}

// gitPath splits "/OWNER/NAME.git/REST". p is a request's decoded path
// (net/url decodes %2e%2e to ".."): every part is checked after decoding,
// owner and name against the one name rule (api.CheckHandle,
// api.CheckName), REST against gitServices.
func gitPath(p string) (owner, name, rest string, ok bool) {
	parts := strings.SplitN(strings.TrimPrefix(p, "/"), "/", 3)
	if !strings.HasPrefix(p, "/") || len(parts) != 3 || !strings.HasSuffix(parts[1], ".git") {
		return "", "", "", false
	}
	owner, name, rest = parts[0], strings.TrimSuffix(parts[1], ".git"), "/"+parts[2]
	if api.CheckHandle(owner) != nil || api.CheckName("name", name) != nil || !gitServices[rest] {
		return "", "", "", false
	}
	return owner, name, rest, true
}

// repoPath is the bare repository of OWNER/NAME, DATA/repos/OWNER/NAME.git,
// once owner and name pass the name rule and the joined path is proven to
// stay inside DATA/repos.
func (s *Server) repoPath(owner, name string) (string, error) {
	if err := api.CheckHandle(owner); err != nil {
		return "", fmt.Errorf("repository owner: %w", err)
	}
	if err := api.CheckName("repository name", name); err != nil {
		return "", err
	}
	return inside(filepath.Join(s.cfg.DataDir, ReposDir), owner, name+".git")
}

// repoDir is repoPath for a repository read from the store, whose names
// passed the rule when it was created (createRepo) or looked up
// (repoByFullName, gitPath). A name that fails it now (a row written by an
// older server, before the rule) is an error naming the repository: the
// request or the background work (the lease sweeper releasing a pipeline's
// commit) fails alone, the server goes on, and no path outside DATA/repos is
// ever used.
func (s *Server) repoDir(owner, name string) (string, error) {
	dir, err := s.repoPath(owner, name)
	if err != nil {
		return "", fmt.Errorf("refusing the path of repository %s/%s, stored by an older server under a name that fails today's rule (rename it): %w",
			owner, name, err)
	}
	return dir, nil
}

// inside joins elems to root and proves the result stays inside root: the
// joined elements must be a local path (filepath.IsLocal: not empty, not
// absolute, no ".." that leaves root), and must not be root itself.
func inside(root string, elems ...string) (string, error) {
	rel := filepath.Join(elems...)
	if !filepath.IsLocal(rel) || rel == "." {
		return "", fmt.Errorf("path %q leaves %s", rel, root)
	}
	return filepath.Join(root, rel), nil
}
