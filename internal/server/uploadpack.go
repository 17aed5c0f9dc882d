package server

import (
	"bytes"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strings"
)

// Fetches (and clones) are served by `git upload-pack --stateless-rpc`
// run directly, as `git http-backend` would run it: one process per
// request instead of the CGI program and then upload-pack. A runner's
// fetch of a run's commit is on the way from a push to the run's first
// step. Pushes still go through http-backend.
//
// Only protocol v0 is spoken, whatever the client's Git-Protocol header
// asks (git clients fall back to it): a v2 fetch serves any object named
// by its id, reachable or not, as uploadpack.allowReachableSHA1InWant
// binds only v0 (see heldcommits.go).

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

// uploadPackCmd is `git upload-pack --stateless-rpc [args] dir`, speaking
// protocol v0 with serveConfig.
func (s *Server) uploadPackCmd(r *http.Request, dir string, args ...string) *exec.Cmd {
	argv := append(serveConfigArgs(), "upload-pack", "--stateless-rpc")
	cmd := exec.CommandContext(r.Context(), s.cfg.Git, append(append(argv, args...), dir)...)
	cmd.Env = []string{"GIT_TERMINAL_PROMPT=0"}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "GIT_PROTOCOL=") {
			cmd.Env = append(cmd.Env, kv)
		}
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
	writePkt(&b, "# service=git-upload-pack\n")
	b.WriteString("0000")
	b.Write(out)
	_, _ = w.Write(b.Bytes())
}

// uploadPack answers POST git-upload-pack: the client's wants and haves
// in, the pack out, as it comes. The body streams to upload-pack (nothing
// is spooled) through its cap, Config.MaxFetchRequest.
func (s *Server) uploadPack(w http.ResponseWriter, r *http.Request, dir string) {
	if ct := r.Header.Get("Content-Type"); ct != "application/x-git-upload-pack-request" {
		http.Error(w, fmt.Sprintf("unsupported content type %q", ct), http.StatusUnsupportedMediaType)
		return
	}
	noCache(w)
	w.Header().Set("Content-Type", "application/x-git-upload-pack-result")
	tooLarge := fmt.Sprintf("fetch request larger than %s, this server's limit (knotless-server --max-fetch-request); "+
		"fetch fewer refs at a time, or ask the server's operator to raise the limit", size(s.cfg.MaxFetchRequest))
	if r.ContentLength > s.cfg.MaxFetchRequest {
		s.log.Warn("git upload-pack: request refused before its body", "dir", dir, "content_length", r.ContentLength)
		refuseFetch(w, tooLarge)
		return
	}
	body, err := newCappedBody(r, s.cfg.MaxFetchRequest)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	// upload-pack answers while its request still arrives (an ACK of the
	// first common commit among the haves): without full duplex, Go's
	// HTTP/1 server would read away and close the rest of the body when
	// that answer's header goes out, under upload-pack's stdin.
	_ = http.NewResponseController(w).EnableFullDuplex()
	cmd := s.uploadPackCmd(r, dir)
	cmd.Stdin = body
	out := &flushWriter{w: w}
	cmd.Stdout = out
	err = cmd.Run()
	switch {
	case body.over():
		s.log.Warn("git upload-pack: request cut at its cap", "dir", dir, "limit", s.cfg.MaxFetchRequest)
		if !out.wrote {
			refuseFetch(w, tooLarge)
		}
	case err != nil && r.Context().Err() == nil:
		s.log.Warn("git upload-pack", "dir", dir, "err", err)
	}
}

// refuseFetch answers a fetch with git's error packet, which git shows as
// "remote error: MSG", and closes the connection: the rest of the body is
// not read.
func refuseFetch(w http.ResponseWriter, msg string) {
	w.Header().Set("Connection", "close")
	var b bytes.Buffer
	writePkt(&b, "ERR "+msg+"\n")
	_, _ = w.Write(b.Bytes())
}

// flushWriter sends what upload-pack writes at once: its answer is a
// stream the client reads as it comes (progress, then the pack).
type flushWriter struct {
	w     http.ResponseWriter
	wrote bool // the answer has begun
}

func (f *flushWriter) Write(p []byte) (int, error) {
	f.wrote = true
	n, err := f.w.Write(p)
	if fl, ok := f.w.(http.Flusher); ok {
		fl.Flush()
	}
	return n, err
}
