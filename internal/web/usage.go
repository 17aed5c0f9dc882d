package web

import (
	"net/http"
	"time"

	"knotless.dev/knotless/internal/api"
)

// expiredOn is how the pages write when retention removed a run's bytes,
// as the API's message does: "2026-12-07 14:05 UTC".
func expiredOn(t *time.Time) string {
	if t == nil {
		return ""
	}
	return t.UTC().Format("2006-01-02 15:04 UTC")
}

// usageView is the Usage tab: what the repository uses, and its
// retention in words.
type usageView struct {
	api.RepoUsage
	CacheBytes   int64
	CacheEntries int
}

// usage shows a repository's Usage tab: its runs' logs and outputs, its
// caches per cache store, what retention removed, and the rules.
func (h *Handler) usage(w http.ResponseWriter, r *http.Request, s *Session) {
	repo := repoOf(r)
	if api.CheckRepo(repo) != nil {
		h.errorPage(w, r, s, http.StatusNotFound, "No such page.")
		return
	}
	u, err := h.b.Usage(r.Context(), s.Viewer, repo)
	if err != nil {
		h.fail(w, r, s, err)
		return
	}
	view := usageView{RepoUsage: u}
	for _, c := range u.Caches {
		view.CacheBytes += c.Bytes
		view.CacheEntries += c.Entries
	}
	h.render(w, http.StatusOK, "usage.html", page{Title: "Usage · " + repo, Session: s, Repo: repo, Tab: "usage", Data: view})
}
