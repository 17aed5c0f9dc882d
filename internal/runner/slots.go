package runner

import (
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
)

// A run's checkout is at a stable path, WORK/workspaces/OWNER/NAME/WORKFLOW/SLOT,
// the same for every run of one repository's workflow: tools that key
// their caches by the source's path (Go's build and test cache, ccache,
// many IDE-ish linters) hit on the next run, as on other CI systems'
// runners. The workspace is emptied before each run's checkout and after
// the run. A path serves one run at a time: with --capacity > 1, a second
// run of the same workflow gets slot 1, and so on (the lowest free one).
// A run taken over after a restart keeps the path its journal names.

// workspaces hands out workspace paths under root. Safe for concurrent use.
type workspaces struct {
	root string

	mu   sync.Mutex
	used map[string]bool
}

// take returns the lowest free slot's path for workflowPath (e.g.
// .knotless/workflows/ci.yml) of repo (OWNER/NAME), held until release.
func (w *workspaces) take(repo, workflowPath string) string {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.used == nil {
		w.used = map[string]bool{}
	}
	owner, name, _ := strings.Cut(repo, "/")
	base := filepath.Join(w.root, pathSafe(owner), pathSafe(name), pathSafe(workflowName(workflowPath)))
	for slot := 0; ; slot++ {
		p := filepath.Join(base, strconv.Itoa(slot))
		if !w.used[p] {
			w.used[p] = true
			return p
		}
	}
}

// hold marks p (a path take returned to an earlier process) in use.
func (w *workspaces) hold(p string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.used == nil {
		w.used = map[string]bool{}
	}
	w.used[p] = true
}

// release frees p for the next run.
func (w *workspaces) release(p string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.used, p)
}

// slotDirs returns the slot directories that exist under root.
func (w *workspaces) slotDirs() []string {
	dirs, _ := filepath.Glob(filepath.Join(w.root, "*", "*", "*", "*"))
	return dirs
}

// workflowName is a workflow file's name without directory and extension.
func workflowName(p string) string {
	b := path.Base(p)
	if ext := path.Ext(b); ext == ".yml" || ext == ".yaml" {
		b = strings.TrimSuffix(b, ext)
	}
	return b
}

// pathSafe maps s to one plain path element: letters, digits, '.', '_'
// and '-' are kept, any other byte becomes '_', and an element of only
// dots (or none) gets a leading '_'. The server's names already follow
// these rules; this keeps a name that is not theirs from leaving the
// workspaces directory.
func pathSafe(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '.', c == '_', c == '-':
			b.WriteByte(c)
		default:
			b.WriteByte('_')
		}
	}
	if strings.Trim(b.String(), ".") == "" {
		return "_" + b.String()
	}
	return b.String()
}
