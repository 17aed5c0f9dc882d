package server_test

import (
	"bytes"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"knotless.dev/knotless/internal/server"
	"knotless.dev/knotless/internal/server/servertest"
)

// /-/download/install.sh is the repository's install.sh byte for byte but
// for its one default_server line, which names this server's URL; a file
// of that name in the release directory is never served in its place.
// Without --release-dir there is nothing to install, and no script.
func TestInstallScript_IsTheRepositorysFileNamingThisServer(t *testing.T) {
	file, err := os.ReadFile("install.sh")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(file, server.InstallScriptSource()) {
		t.Fatal("the embedded install.sh is not internal/server/install.sh")
	}
	if n := strings.Count(string(file), "\ndefault_server=\n"); n != 1 {
		t.Fatalf("install.sh has %d lines default_server=, want exactly one for the server to fill", n)
	}
	release := t.TempDir()
	if err := os.WriteFile(filepath.Join(release, server.InstallScript), []byte("#!/bin/sh\necho not the server's\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	s := servertest.Start(t, servertest.Options{ReleaseDir: release})
	resp, err := http.Get(s.URL + server.DownloadPath + server.InstallScript)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	want := strings.Replace(string(file), "\ndefault_server=\n", "\ndefault_server='"+s.URL+"'\n", 1)
	if resp.StatusCode != http.StatusOK || string(got) != want {
		t.Fatalf("GET install.sh: %d, %d bytes; want 200 and install.sh with default_server='%s':\n%.400s", resp.StatusCode, len(got), s.URL, got)
	}

	bare := servertest.Start(t, servertest.Options{})
	resp, err = http.Get(bare.URL + server.DownloadPath + server.InstallScript)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound || !strings.Contains(string(body), "--release-dir") {
		t.Fatalf("GET install.sh without --release-dir: %d %q; want 404 naming --release-dir", resp.StatusCode, body)
	}
}

// A URL holding a single quote still reaches the script as itself: sh
// reads the rendered line back to the very URL.
func TestInstallScript_QuotesTheServersURLForSh(t *testing.T) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Fatal(err)
	}
	url := "https://ci.example.com/it's/$HOME/`id`"
	var line string
	for _, l := range strings.Split(string(server.RenderInstallScript(url)), "\n") {
		if strings.HasPrefix(l, "default_server=") {
			line = l
		}
	}
	out, err := exec.Command(sh, "-c", line+"\nprintf %s \"$default_server\"").Output()
	if err != nil || string(out) != url {
		t.Fatalf("sh read %q back as %q (%v), want %q", line, out, err, url)
	}
}
