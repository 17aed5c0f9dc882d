package server

import (
	"bytes"
	_ "embed"
	"net/http"
	"strings"
	"time"
)

// InstallScript is the name, under DownloadPath, of the script that
// installs knotless-run and knotless-agent on a plain Linux host from this
// server's release files, each checked against ReleaseSums
// (docs/runner.md): `curl -fsSL URL/-/download/install.sh | sh`. It is
// served with the release files (only under --release-dir: without them it
// would have nothing to install) but comes from this program, not from the
// release directory, so every release directory has it and a file of that
// name there is never served.
const InstallScript = "install.sh"

// installScript is install.sh, the one copy of the script.
//
//go:embed install.sh
var installScript []byte

// installServerLine is the line of installScript that RenderInstallScript
// fills with the server's URL.
const installServerLine = "\ndefault_server=\n"

// RenderInstallScript returns install.sh as a server whose public base URL
// (Config.URL, --url) is url serves it: the file's bytes with its one
// line "default_server=" set to url, single-quoted for sh, so the piped
// script knows where it came from. Everything else is the file as it is
// in the repository.
func RenderInstallScript(url string) []byte {
	quoted := "'" + strings.ReplaceAll(url, "'", `'\''`) + "'"
	return bytes.Replace(installScript, []byte(installServerLine), []byte("\ndefault_server="+quoted+"\n"), 1)
}

// InstallScriptSource returns install.sh as it is in the repository
// (default_server empty).
func InstallScriptSource() []byte { return bytes.Clone(installScript) }

// serveInstallScript answers DownloadPath + InstallScript with the script
// rendered for this server.
func (s *Server) serveInstallScript(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Content-Type", "text/plain; charset=utf-8")
	h.Set("Cache-Control", "no-cache")
	s.log.Debug("install script", "remote", r.RemoteAddr)
	http.ServeContent(w, r, InstallScript, time.Time{}, bytes.NewReader(RenderInstallScript(s.cfg.URL)))
}
