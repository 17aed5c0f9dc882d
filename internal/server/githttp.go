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
// to let runners fetch any commit by SHA and to accept pushes over HTTP.
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
	for _, kv := range [][2]string{{"uploadpack.allowAnySHA1InWant", "true"}, {"http.receivepack", "true"}} {
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
// token (fetch only, only the run's repository, only while the run is
// active).
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
	if a, err := s.store.AccountByToken(ctx, hashToken(pass)); err == nil {
		acct = &a
	} else if !errors.Is(err, store.ErrNotFound) {
		s.log.Error("git auth", "err", err)
		http.Error(w, "internal error", http.StatusInternalServerError)
		return
	} else if x, err := s.store.RunByToken(ctx, hashToken(pass)); err == nil && !api.IsFinal(x.State) {
		run = &x
	}
	if acct == nil && run == nil {
		unauthorized(w, "invalid token")
		return
	}
	repo, err := s.store.RepoByName(ctx, owner, name)
	if errors.Is(err, store.ErrNotFound) {
		http.Error(w, fmt.Sprintf("no repository %s/%s", owner, name), http.StatusNotFound)
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
			http.Error(w, fmt.Sprintf("only the owner of %s or an admin may fetch or push", repo.FullName()), http.StatusForbidden)
			return
		}
		user = acct.Handle
	case push:
		http.Error(w, "a run token can only fetch", http.StatusForbidden)
		return
	case run.RepoID != repo.ID:
		http.Error(w, "this run token is for another repository", http.StatusForbidden)
		return
	default:
		user = fmt.Sprintf("run-%d", run.ID)
	}
	if push && rest == "/git-receive-pack" {
		s.receivePack(w, r, repo, user)
		return
	}
	if !push && s.serveUploadPack(w, r, s.repoDir(repo.Owner, repo.Name), rest) {
		return
	}
	s.httpBackend(w, r, user)
}

// receivePack serves one push, serialized per repository, and makes
// pipelines for the refs it created or updated.
func (s *Server) receivePack(w http.ResponseWriter, r *http.Request, repo store.Repo, user string) {
	mu := &s.repoMu[repo.ID%int64(len(s.repoMu))]
	mu.Lock()
	defer mu.Unlock()
	// Pipelines are made even if the pusher hangs up after sending.
	ctx := context.WithoutCancel(r.Context())
	dir := s.repoDir(repo.Owner, repo.Name)
	before, err := s.refs(ctx, dir)
	if err != nil {
		s.log.Error("git: read refs before push", "repo", repo.FullName(), "err", err)
		http.Error(w, "internal error", http.StatusInternalServerError)
		return
	}
	s.httpBackend(w, r, user)
	after, err := s.refs(ctx, dir)
	if err != nil {
		s.log.Error("git: read refs after push", "repo", repo.FullName(), "err", err)
		return
	}
	s.afterPush(ctx, repo, before, after)
}

// httpBackend hands the request to `git http-backend`. The request's
// Authorization header is not passed on: no token reaches git's
// environment.
func (s *Server) httpBackend(w http.ResponseWriter, r *http.Request, user string) {
	r = r.Clone(r.Context())
	r.Header.Del("Authorization")
	// net/http/cgi refuses chunked bodies (git sends large pushes chunked):
	// spool them to a file so the length is known.
	if r.ContentLength < 0 || len(r.TransferEncoding) > 0 {
		f, err := os.CreateTemp(filepath.Join(s.cfg.DataDir, TmpDir), "body-*")
		if err != nil {
			s.log.Error("git: spool request body", "err", err)
			http.Error(w, "internal error", http.StatusInternalServerError)
			return
		}
		defer os.Remove(f.Name())
		defer f.Close()
		n, err := io.Copy(f, r.Body)
		if err != nil {
			status := http.StatusBadRequest
			if errors.Is(err, errBodyTooSlow) {
				status = http.StatusRequestTimeout
			}
			http.Error(w, "read request body: "+err.Error(), status)
			return
		}
		if _, err := f.Seek(0, io.SeekStart); err != nil {
			http.Error(w, "internal error", http.StatusInternalServerError)
			return
		}
		r.Body, r.ContentLength, r.TransferEncoding = f, n, nil
		s.log.Debug("git: spooled chunked request body", "bytes", n)
	}
	h := &cgi.Handler{
		Path: s.cfg.Git,
		Args: []string{"http-backend"},
		Dir:  filepath.Join(s.cfg.DataDir, ReposDir),
		Env: []string{
			"GIT_PROJECT_ROOT=" + filepath.Join(s.cfg.DataDir, ReposDir),
			"GIT_HTTP_EXPORT_ALL=1",
			"REMOTE_USER=" + user,
		},
		InheritEnv: []string{"HOME", "TMPDIR"},
		Stderr:     &logWriter{s: s},
	}
	h.ServeHTTP(w, r)
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
