package server

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
)

// Fetches (and clones) are served by `git upload-pack --stateless-rpc`
// run directly, as `git http-backend` would run it: one process per
// request instead of the CGI program and then upload-pack. A runner's
// fetch of a run's commit is on the way from a push to the run's first
// step. Pushes and dumb-HTTP requests still go through http-backend.

// gitProtocolRE is what a Git-Protocol header may hold (passed on to git
// as GIT_PROTOCOL, like http-backend does): "version=2" and its kin.
var gitProtocolRE = regexp.MustCompile(`^[A-Za-z0-9=:._-]{1,100}$`)

// serveUploadPack serves the smart-HTTP upload-pack requests of the bare
// repository dir, and reports whether rest was one.
func (s *Server) serveUploadPack(w http.ResponseWriter, r *http.Request, dir, rest string) bool {
	switch {
	case rest == "/info/refs" && r.Method == http.MethodGet && r.URL.Query().Get("service") == "git-upload-pack":
		s.advertiseUploadPack(w, r, dir)
	case rest == "/git-upload-pack" && r.Method == http.MethodPost:
		s.uploadPack(w, r, dir)
	default:
		return false
	}
	return true
}

func noCache(w http.ResponseWriter) {
	h := w.Header()
	h.Set("Expires", "Fri, 01 Jan 1980 00:00:00 GMT")
	h.Set("Pragma", "no-cache")
	h.Set("Cache-Control", "no-cache, max-age=0, must-revalidate")
}

// uploadPackCmd is `git upload-pack --stateless-rpc [args] dir` with the
// request's protocol version.
func (s *Server) uploadPackCmd(r *http.Request, dir string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(r.Context(), s.cfg.Git, append(append([]string{"upload-pack", "--stateless-rpc"}, args...), dir)...)
	cmd.Env = append(os.Environ(), "GIT_TERMINAL_PROMPT=0")
	if p := r.Header.Get("Git-Protocol"); gitProtocolRE.MatchString(p) {
		cmd.Env = append(cmd.Env, "GIT_PROTOCOL="+p)
	}
	cmd.Stderr = &logWriter{s: s}
	return cmd
}

// advertiseUploadPack answers GET info/refs?service=git-upload-pack.
func (s *Server) advertiseUploadPack(w http.ResponseWriter, r *http.Request, dir string) {
	out, err := s.uploadPackCmd(r, dir, "--http-backend-info-refs").Output()
	if err != nil {
		s.log.Error("git upload-pack: advertise refs", "dir", dir, "err", err)
		http.Error(w, "internal error", http.StatusInternalServerError)
		return
	}
	noCache(w)
	w.Header().Set("Content-Type", "application/x-git-upload-pack-advertisement")
	var b bytes.Buffer
	if !slices.Contains(strings.Split(r.Header.Get("Git-Protocol"), ":"), "version=2") {
		// Protocol v0 opens with the service line; v2 does not.
		const line = "# service=git-upload-pack\n"
		fmt.Fprintf(&b, "%04x%s0000", len(line)+4, line)
	}
	b.Write(out)
	_, _ = w.Write(b.Bytes())
}

// uploadPack answers POST git-upload-pack: the client's wants and haves
// in, the pack out, as it comes.
func (s *Server) uploadPack(w http.ResponseWriter, r *http.Request, dir string) {
	if ct := r.Header.Get("Content-Type"); ct != "application/x-git-upload-pack-request" {
		http.Error(w, fmt.Sprintf("unsupported content type %q", ct), http.StatusUnsupportedMediaType)
		return
	}
	body := io.Reader(r.Body)
	if r.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(r.Body)
		if err != nil {
			http.Error(w, "bad gzip body: "+err.Error(), http.StatusBadRequest)
			return
		}
		defer zr.Close()
		body = zr
	}
	cmd := s.uploadPackCmd(r, dir)
	cmd.Stdin = body
	noCache(w)
	w.Header().Set("Content-Type", "application/x-git-upload-pack-result")
	cmd.Stdout = flushWriter{w}
	if err := cmd.Run(); err != nil && r.Context().Err() == nil {
		s.log.Warn("git upload-pack", "dir", dir, "err", err)
	}
}

// flushWriter sends what upload-pack writes at once: its answer is a
// stream the client reads as it comes (progress, then the pack).
type flushWriter struct{ w http.ResponseWriter }

func (f flushWriter) Write(p []byte) (int, error) {
	n, err := f.w.Write(p)
	if fl, ok := f.w.(http.Flusher); ok {
		fl.Flush()
	}
	return n, err
}
