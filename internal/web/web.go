package web

import (
	"context"
	"crypto/subtle"
	"embed"
	"errors"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"knotless.dev/knotless/internal/api"
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// CookieName is the session cookie's name.
const CookieName = "knotless_session"

// Defaults of Config.
const (
	// DefaultPipelinesPage is how many pipelines one page of the
	// Pipelines tab lists.
	DefaultPipelinesPage = 20
	// DefaultLogTail is how many bytes of a step's log the run page loads
	// at first (and per "Load earlier"): a 100 MB log is never sent whole.
	DefaultLogTail = 256 << 10
)

// maxForm caps a form's body in bytes.
const maxForm = 16 << 10

// maxEvent caps the log bytes of one server-sent event.
const maxEvent = 64 << 10

// CSP is the Content-Security-Policy of every page: scripts and styles
// only from this server's files, no inline script, no eval, no framing.
const CSP = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"

// Config is the settings of Handler.
type Config struct {
	Backend Backend
	// Secure marks the session cookie Secure (the server's URL is https);
	// a request that arrived over TLS gets it anyway.
	Secure bool
	// Logger receives one line per sign-in, sign-out and failed page;
	// default slog.Default().
	Logger *slog.Logger
	// PipelinesPage and LogTail: see the Default* constants.
	PipelinesPage int
	LogTail       int64
}

// Handler serves the pages. Make it with New.
type Handler struct {
	cfg  Config
	b    Backend
	log  *slog.Logger
	tmpl *template.Template
	mux  *http.ServeMux
	h    http.Handler
}

// New returns the pages' handler. Mount it at "/" behind the API and git
// routes: it answers "/", "/-/..." and "/OWNER/NAME[/-/...]".
func New(cfg Config) *Handler {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.PipelinesPage <= 0 {
		cfg.PipelinesPage = DefaultPipelinesPage
	}
	if cfg.LogTail <= 0 {
		cfg.LogTail = DefaultLogTail
	}
	h := &Handler{cfg: cfg, b: cfg.Backend, log: cfg.Logger, mux: http.NewServeMux()}
	h.tmpl = template.Must(template.New("").Funcs(funcs).ParseFS(templateFS, "templates/*.html"))
	static, _ := fs.Sub(staticFS, "static")
	files := http.FileServerFS(static)
	// Two muxes: "/-/..." is the server's own (no handle or repository
	// name is "-"), the rest is repositories'.
	own, repos := http.NewServeMux(), h.mux
	own.Handle("GET /-/static/", http.StripPrefix("/-/static/", cacheFor(time.Hour, files)))
	own.HandleFunc("GET /-/login", h.loginForm)
	own.HandleFunc("POST /-/login", h.login)
	own.HandleFunc("POST /-/logout", h.signedIn(h.logout))
	own.HandleFunc("GET /-/runs/{run}", h.signedIn(h.runPage))
	own.HandleFunc("GET /-/runs/{run}/events", h.signedIn(h.runEvents))
	own.HandleFunc("GET /-/runs/{run}/log/{step}", h.signedIn(h.logPart))
	own.HandleFunc("GET /-/runs/{run}/log/{step}/raw", h.signedIn(h.rawLog))
	own.HandleFunc("GET /-/runs/{run}/outputs.tar", h.signedIn(h.outputs))
	own.HandleFunc("POST /-/runs/{run}/cancel", h.signedIn(h.cancel))
	own.HandleFunc("POST /-/runs/{run}/rerun", h.signedIn(h.rerunRun))
	own.HandleFunc("POST /-/pipelines/{pipeline}/rerun", h.signedIn(h.rerunFailed))
	repos.HandleFunc("GET /{$}", h.signedIn(h.home))
	repos.HandleFunc("GET /{owner}/{name}", h.signedIn(h.pipelines))
	repos.HandleFunc("GET /{owner}/{name}/-/runners", h.signedIn(h.runners))
	repos.HandleFunc("POST /{owner}/{name}/-/runners/approve", h.signedIn(h.approve))
	repos.HandleFunc("POST /{owner}/{name}/-/runners/remove", h.signedIn(h.remove))
	repos.HandleFunc("GET /{owner}/{name}/-/usage", h.signedIn(h.usage))
	repos.HandleFunc("GET /{owner}/{name}/-/schedules", h.signedIn(h.schedules))
	repos.HandleFunc("POST /{owner}/{name}/-/schedules/pause", h.signedIn(h.pauseSchedule))
	notFound := func(w http.ResponseWriter, r *http.Request) {
		h.errorPage(w, r, nil, http.StatusNotFound, "No such page.")
	}
	own.HandleFunc("/", notFound)
	repos.HandleFunc("/", notFound)
	m := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/-/") {
			own.ServeHTTP(w, r)
			return
		}
		repos.ServeHTTP(w, r)
	})
	h.h = http.NewCrossOriginProtection().Handler(m)
	return h
}

// ServeHTTP implements http.Handler: security headers, then the pages.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	hd := w.Header()
	hd.Set("Content-Security-Policy", CSP)
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("X-Frame-Options", "DENY")
	hd.Set("Referrer-Policy", "same-origin")
	h.h.ServeHTTP(w, r)
}

func cacheFor(d time.Duration, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "public, max-age="+strconv.Itoa(int(d.Seconds())))
		next.ServeHTTP(w, r)
	})
}

// page is what every template gets.
type page struct {
	Title   string
	Session *Session
	Repo    string // OWNER/NAME when the page belongs to a repository
	Tab     string // pipelines, runners, usage, schedules
	Flash   string
	Data    any
}

type sessionKey struct{}

// signedIn runs f with the request's session; without one, GETs go to the
// sign-in form (and come back), other requests get 401. A POST must carry
// the session's form token.
func (h *Handler) signedIn(f func(http.ResponseWriter, *http.Request, *Session)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var s Session
		c, err := r.Cookie(CookieName)
		if err == nil {
			s, err = h.b.Session(r.Context(), c.Value)
		}
		if err != nil {
			if !isStatus(err, http.StatusUnauthorized) && !errors.Is(err, http.ErrNoCookie) {
				h.fail(w, r, nil, err)
				return
			}
			if c != nil {
				h.clearCookie(w, r)
			}
			if r.Method == http.MethodGet && !strings.HasSuffix(r.URL.Path, "/events") {
				http.Redirect(w, r, "/-/login?next="+url.QueryEscape(r.URL.RequestURI()), http.StatusSeeOther)
				return
			}
			h.errorPage(w, r, nil, http.StatusUnauthorized, "Sign in first.")
			return
		}
		if r.Method == http.MethodPost {
			r.Body = http.MaxBytesReader(w, r.Body, maxForm) // a form holds a few short fields
			got := r.PostFormValue("csrf")
			if subtle.ConstantTimeCompare([]byte(got), []byte(s.CSRF)) != 1 {
				h.errorPage(w, r, &s, http.StatusForbidden, "This form is stale or came from another site: reload the page and try again.")
				return
			}
		}
		f(w, r.WithContext(context.WithValue(r.Context(), sessionKey{}, &s)), &s)
	}
}

func (h *Handler) render(w http.ResponseWriter, status int, name string, p page) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	if err := h.tmpl.ExecuteTemplate(w, name, p); err != nil {
		h.log.Warn("render page", "page", name, "err", err)
	}
}

// errorPage answers with a page saying msg.
func (h *Handler) errorPage(w http.ResponseWriter, r *http.Request, s *Session, status int, msg string) {
	h.render(w, status, "error.html", page{Title: http.StatusText(status), Session: s, Data: msg})
}

// fail answers a Backend error. What the viewer may not see is a 404,
// exactly like what does not exist: a page never tells a stranger that a
// repository or run is there.
func (h *Handler) fail(w http.ResponseWriter, r *http.Request, s *Session, err error) {
	var e *api.Error
	switch {
	case errors.As(err, &e) && (e.Status == http.StatusForbidden || e.Status == http.StatusNotFound):
		h.errorPage(w, r, s, http.StatusNotFound, "No such page, or you may not see it.")
	case errors.As(err, &e) && e.Status == http.StatusUnauthorized:
		h.clearCookie(w, r)
		http.Redirect(w, r, "/-/login", http.StatusSeeOther)
	case errors.As(err, &e) && (e.Status < 500 || e.Status == http.StatusServiceUnavailable):
		// A 503 says what is away and when to come back (the object
		// store holding a moved log: api.ErrObjectStoreUnavailable).
		h.errorPage(w, r, s, e.Status, e.Message)
	case errors.Is(err, context.Canceled) && r.Context().Err() != nil:
	default:
		h.log.Error("page failed", "path", r.URL.Path, "err", err)
		h.errorPage(w, r, s, http.StatusInternalServerError, "Internal error; see the server log.")
	}
}

func isStatus(err error, status int) bool {
	var e *api.Error
	return errors.As(err, &e) && e.Status == status
}

func (h *Handler) secure(r *http.Request) bool { return h.cfg.Secure || r.TLS != nil }

func (h *Handler) setCookie(w http.ResponseWriter, r *http.Request, s Session) {
	http.SetCookie(w, &http.Cookie{Name: CookieName, Value: s.ID, Path: "/", Expires: s.ExpiresAt,
		MaxAge: max(int(time.Until(s.ExpiresAt).Seconds()), 1), HttpOnly: true, Secure: h.secure(r), SameSite: http.SameSiteLaxMode})
}

func (h *Handler) clearCookie(w http.ResponseWriter, r *http.Request) {
	http.SetCookie(w, &http.Cookie{Name: CookieName, Value: "", Path: "/", MaxAge: -1, HttpOnly: true,
		Secure: h.secure(r), SameSite: http.SameSiteLaxMode})
}

// localPath returns next when it is a path on this server, else "/".
func localPath(next string) string {
	if !strings.HasPrefix(next, "/") || strings.HasPrefix(next, "//") || strings.HasPrefix(next, "/\\") || strings.ContainsAny(next, "\r\n") {
		return "/"
	}
	return next
}

func (h *Handler) loginForm(w http.ResponseWriter, r *http.Request) {
	h.render(w, http.StatusOK, "login.html", page{Title: "Sign in", Data: localPath(r.URL.Query().Get("next"))})
}

func (h *Handler) login(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, maxForm)
	tok := strings.TrimSpace(r.PostFormValue("token"))
	next := localPath(r.PostFormValue("next"))
	if tok == "" {
		h.render(w, http.StatusBadRequest, "login.html", page{Title: "Sign in", Flash: "Paste an account API token.", Data: next})
		return
	}
	s, err := h.b.SignIn(r.Context(), tok)
	if err != nil {
		var e *api.Error
		if errors.As(err, &e) && e.Status == http.StatusUnauthorized {
			h.log.Info("web sign-in refused", "err", e.Message)
			h.render(w, http.StatusUnauthorized, "login.html", page{Title: "Sign in", Flash: e.Message, Data: next})
			return
		}
		h.fail(w, r, nil, err)
		return
	}
	h.log.Info("web sign-in", "account", s.Viewer.Handle)
	h.setCookie(w, r, s)
	http.Redirect(w, r, next, http.StatusSeeOther)
}

func (h *Handler) logout(w http.ResponseWriter, r *http.Request, s *Session) {
	if err := h.b.SignOut(r.Context(), s.ID); err != nil {
		h.fail(w, r, s, err)
		return
	}
	h.log.Info("web sign-out", "account", s.Viewer.Handle)
	h.clearCookie(w, r)
	http.Redirect(w, r, "/-/login", http.StatusSeeOther)
}

func (h *Handler) home(w http.ResponseWriter, r *http.Request, s *Session) {
	repos, err := h.b.Repos(r.Context(), s.Viewer)
	if err != nil {
		h.fail(w, r, s, err)
		return
	}
	h.render(w, http.StatusOK, "home.html", page{Title: "Repositories", Session: s, Data: repos})
}
