package server

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/cgi"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/store"
)

// git runs git on a bare repository and returns its standard output.
func (s *Server) git(ctx context.Context, dir string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, s.cfg.Git, append([]string{"--git-dir", dir}, args...)...)
	cmd.Env = append(os.Environ(), "GIT_TERMINAL_PROMPT=0", "LC_ALL=C")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, fmt.Errorf("git %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return out, nil
}

// initBare creates the bare repository of OWNER/NAME (idempotent), set up
// to accept pushes over HTTP. What fetches may ask for is set where
// upload-pack runs (serveConfig).
func (s *Server) initBare(ctx context.Context, owner, name string) error {
	dir, err := s.repoPath(owner, name)
	if err != nil {
		return badRequest("%v", err)
	}
	if err := os.MkdirAll(filepath.Dir(dir), 0o700); err != nil {
		return fmt.Errorf("create repository directory: %w", err)
	}
	if _, err := s.git(ctx, dir, "init", "--quiet", "--bare", "--initial-branch=main", dir); err != nil {
		return fmt.Errorf("create repository %s/%s: %w", owner, name, err)
	}
	for _, kv := range [][2]string{{"http.receivepack", "true"}} {
		if _, err := s.git(ctx, dir, "config", kv[0], kv[1]); err != nil {
			return fmt.Errorf("configure repository %s/%s: %w", owner, name, err)
		}
	}
	return nil
}

// refs returns every ref of a repository: full name → object id.
func (s *Server) refs(ctx context.Context, dir string) (map[string]string, error) {
	out, err := s.git(ctx, dir, "for-each-ref", "--format=%(objectname) %(refname)")
	if err != nil {
		return nil, err
	}
	m := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if oid, ref, ok := strings.Cut(sc.Text(), " "); ok {
			m[ref] = oid
		}
	}
	return m, sc.Err()
}

func unauthorized(w http.ResponseWriter, msg string) {
	w.Header().Set("WWW-Authenticate", `Basic realm="knotless"`)
	http.Error(w, msg, http.StatusUnauthorized)
}

// serveGit serves git smart HTTP for OWNER/NAME. The basic-auth password is
// an account API token (fetch and push: the owner or an admin) or a run
// token (fetch only, only while the run is active, only repositories of
// the owner of the run's repository: its own, and its submodules on this
// server, which that owner, who alone pushes the workflow, can read).
func (s *Server) serveGit(w http.ResponseWriter, r *http.Request, owner, name, rest string) {
	ctx := r.Context()
	push := rest == "/git-receive-pack" || r.URL.Query().Get("service") == "git-receive-pack"
	_, pass, ok := r.BasicAuth()
	if !ok || pass == "" {
		unauthorized(w, "authentication required: use an API token as the password")
		return
	}
	var acct *store.Account
	var run *store.Run
	if a, err := s.store.AccountByToken(ctx, hashToken(pass), s.now()); err == nil {
		acct = &a
	} else if errors.Is(err, store.ErrTokenExpired) {
		unauthorized(w, "API "+storeMessage(err, store.ErrTokenExpired)+": use another token of the account")
		return
	} else if errors.Is(err, store.ErrAccountDisabled) {
		unauthorized(w, storeMessage(err, store.ErrAccountDisabled)+" is disabled by an admin of this server")
		return
	} else if !errors.Is(err, store.ErrNotFound) {
		s.log.Error("git auth", "err", err)
		http.Error(w, "internal error", http.StatusInternalServerError)
		return
	} else if x, err := s.store.RunByToken(ctx, hashToken(pass)); err == nil && !api.IsFinal(x.State) {
		run = &x
	}
	if acct == nil && run == nil {
		unauthorized(w, "invalid token (unknown, revoked, or of a finished run)")
		return
	}
	// A repository the caller may not fetch is answered exactly as one
	// that does not exist (404, the same message), so that names of other
	// accounts' repositories are not revealed.
	notFound := func() {
		msg := fmt.Sprintf("no repository %s/%s", owner, name)
		if run != nil {
			runOwner, _, _ := strings.Cut(run.Repo, "/")
			if runOwner != owner {
				msg += fmt.Sprintf(" for a run of %s: a run may fetch only repositories of %s "+
					"(a submodule elsewhere must be public, or moved to %s)", run.Repo, runOwner, runOwner)
			}
		}
		http.Error(w, msg, http.StatusNotFound)
	}
	repo, err := s.store.RepoByName(ctx, owner, name)
	if errors.Is(err, store.ErrNotFound) {
		notFound()
		return
	}
	if err != nil {
		s.log.Error("git: look up repository", "err", err)
		http.Error(w, "internal error", http.StatusInternalServerError)
		return
	}
	user := ""
	switch {
	case acct != nil:
		if !canManage(*acct, repo) {
			notFound()
			return
		}
		user = acct.Handle
	case run.RepoOwnerID != repo.OwnerID:
		notFound()
		return
	case push:
		http.Error(w, "a run token can only fetch", http.StatusForbidden)
		return
	default:
		user = fmt.Sprintf("run-%d", run.ID)
	}
	dir, err := s.repoDir(repo.Owner, repo.Name)
	if err != nil {
		s.log.Error("git: repository path", "repo", repo.FullName(), "err", err)
		http.Error(w, "internal error: this repository's stored name fails the name rule; the server's log says more", http.StatusInternalServerError)
		return
	}
	switch {
	case push && rest == "/git-receive-pack" && r.Method == http.MethodPost:
		s.receivePack(w, r, repo, user)
	case push && rest == "/info/refs" && r.Method == http.MethodGet:
		s.httpBackend(w, r, user, http.NoBody, 0)
	case !push && s.serveUploadPack(w, r, dir, rest):
	default:
		// Dumb HTTP would hand out any object file, reachable or not.
		http.Error(w, "not a smart-HTTP git request: this server speaks only git's smart HTTP protocol (git 1.6.6 or later)",
			http.StatusNotFound)
	}
}

// httpBackend hands a receive-pack request to `git http-backend`, with
// body (size bytes, nothing chunked or compressed) as the request's body.
// The request's Authorization header is not passed on: no token reaches
// git's environment.
func (s *Server) httpBackend(w http.ResponseWriter, r *http.Request, user string, body io.Reader, size int64) {
	r = r.Clone(r.Context())
	r.Header.Del("Authorization")
	r.Header.Del("Content-Encoding")
	r.Body, r.ContentLength, r.TransferEncoding = io.NopCloser(body), size, nil
	env := []string{
		"GIT_PROJECT_ROOT=" + filepath.Join(s.cfg.DataDir, ReposDir),
		"GIT_HTTP_EXPORT_ALL=1",
		"REMOTE_USER=" + user,
	}
	h := &cgi.Handler{
		Path:       s.cfg.Git,
		Args:       []string{"http-backend"},
		Dir:        filepath.Join(s.cfg.DataDir, ReposDir),
		Env:        append(env, gitConfigEnv(append(serveConfig, [2]string{"receive.maxInputSize", fmt.Sprint(s.cfg.MaxPushSize)}))...),
		InheritEnv: []string{"HOME", "TMPDIR"},
		Stderr:     &logWriter{s: s},
	}
	h.ServeHTTP(w, r)
}

// gitConfigEnv passes configuration to git through its environment, as
// `git -c` does on the command line (and over a repository's own).
func gitConfigEnv(kvs [][2]string) []string {
	env := []string{fmt.Sprintf("GIT_CONFIG_COUNT=%d", len(kvs))}
	for i, kv := range kvs {
		env = append(env, fmt.Sprintf("GIT_CONFIG_KEY_%d=%s", i, kv[0]), fmt.Sprintf("GIT_CONFIG_VALUE_%d=%s", i, kv[1]))
	}
	return env
}

// logWriter turns git's standard error into log lines.
type logWriter struct{ s *Server }

func (l *logWriter) Write(p []byte) (int, error) {
	for _, line := range strings.Split(strings.TrimRight(string(p), "\n"), "\n") {
		if line != "" {
			l.s.log.Warn("git http-backend", "stderr", line)
		}
	}
	return len(p), nil
}
