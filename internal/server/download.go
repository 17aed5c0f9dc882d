package server

import (
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"
)

// DownloadPath is where the server serves the files of a release
// (Config.ReleaseDir, what `make release` wrote): GET or HEAD
// /-/download/FILE, FILE the name of one regular file directly in that
// directory, e.g. /-/download/knotless-run-linux-amd64. It is what a
// runner's KNOTLESS_DOWNLOAD_URL names (https://SERVER/-/download), so a
// cluster needs no other web server; the runner pod's init container still
// checks every file's SHA-256. Beside them it serves InstallScript, which
// installs knotless-run on a plain host. "/-/" is the server's own part of
// the URL space: no account or repository is named "-".
const DownloadPath = "/-/download/"

// ReleaseSums is the file of a release listing the others with their
// SHA-256 (sha256sum's format).
const ReleaseSums = "SHA256SUMS"

// checkReleaseDir makes dir absolute and proves it is a directory.
// Errors name --release-dir and what to give.
func checkReleaseDir(dir string) (string, error) {
	abs, err := filepath.Abs(dir)
	if err == nil {
		var fi os.FileInfo
		if fi, err = os.Stat(abs); err == nil && !fi.IsDir() {
			err = errors.New("not a directory")
		}
	}
	if err != nil {
		return "", fmt.Errorf("--release-dir %s: %v: give the directory `make release` wrote (dist in a checkout)", dir, err)
	}
	return abs, nil
}

// releaseFileName tells whether name can be a file of a release: one
// path element of letters, digits, '.', '_', '+' and '-', not beginning
// with '.' (so neither "..", nor a hidden or half-written file), at most
// 255 bytes.
func releaseFileName(name string) bool {
	if name == "" || len(name) > 255 || name[0] == '.' {
		return false
	}
	for _, c := range name {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '.', c == '_', c == '+', c == '-':
		default:
			return false
		}
	}
	return true
}

// serveDownload answers DownloadPath: the file's bytes (with Range,
// If-Modified-Since and HEAD, as http.ServeContent does), or 404 for
// anything that is not a regular file directly in the release directory:
// no listing, no subdirectory, no symlink leading out of it (os.Root
// refuses those), no hidden file.
func (s *Server) serveDownload(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "release files are read with GET", http.StatusMethodNotAllowed)
		return
	}
	if s.cfg.ReleaseDir == "" {
		http.Error(w, "this server serves no release files: start knotless-server with --release-dir DIR, the directory `make release` wrote", http.StatusNotFound)
		return
	}
	name := strings.TrimPrefix(r.URL.Path, DownloadPath)
	if name == InstallScript {
		s.serveInstallScript(w, r)
		return
	}
	notFound := func() {
		shown := name
		if len(shown) > 80 {
			shown = shown[:80] + "..."
		}
		http.Error(w, fmt.Sprintf("no release file %q here: name one file of the release, as %s%s lists them", shown, DownloadPath, ReleaseSums), http.StatusNotFound)
	}
	if !releaseFileName(name) {
		notFound()
		return
	}
	f, err := os.OpenInRoot(s.cfg.ReleaseDir, name)
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			s.log.Debug("release file refused", "file", name, "err", err)
		}
		notFound()
		return
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() {
		notFound()
		return
	}
	h := w.Header()
	h.Set("X-Content-Type-Options", "nosniff")
	if name == ReleaseSums || strings.HasSuffix(name, ".yaml") {
		h.Set("Content-Type", "text/plain; charset=utf-8")
	} else {
		h.Set("Content-Type", "application/octet-stream")
	}
	s.log.Debug("release file", "file", name, "bytes", fi.Size(), "remote", r.RemoteAddr)
	http.ServeContent(w, r, name, fi.ModTime(), f)
}
