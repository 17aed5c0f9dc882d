package e2e

import (
	"bytes"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"knotless.dev/knotless/internal/deploy"
	"knotless.dev/knotless/internal/server"
	"knotless.dev/knotless/internal/testenv"
)

// bareHost is a root file system with a shell and a few busybox applets
// and nothing else (no Go, no git, no curl): the plain host install.sh
// must work on. Commands run in it chrooted, sharing this machine's
// network, so the test's server on 127.0.0.1 is reachable and no network
// namespace is needed. It has no /proc.
type bareHost struct {
	t    *testing.T
	root string
}

// bareShells are the shells a bareHost's /bin/sh can be: busybox's own
// (busybox-static alone, as on a minimal image) or dash with its libc (as
// on a minimal Debian), the applets then from busybox off PATH.
var bareShells = []string{"busybox", "dash"}

// bareApplets are the tools a bare host has besides its shell: those
// install.sh names (wget for curl; sha256sum).
var bareApplets = []string{"uname", "wget", "sha256sum", "mkdir", "chmod", "mv", "rm", "cat", "ls"}

// newBareHost makes a bareHost whose /bin/sh is shell (one of bareShells)
// with applets (nil: bareApplets) linked to busybox in /bin. It needs root
// (chroot, mknod), a static busybox at /bin/busybox (busybox-static) and,
// for dash, /usr/bin/dash: all on CI, so their absence fails there
// (testenv).
func newBareHost(t *testing.T, shell string, applets []string) *bareHost {
	t.Helper()
	if os.Geteuid() != 0 {
		testenv.Skipf(t, "install.sh's tests chroot into a bare root file system: run as root")
	}
	const busybox = "/bin/busybox"
	f, err := elf.Open(busybox)
	if err != nil {
		testenv.Skipf(t, "no busybox at %s (%v): install busybox-static", busybox, err)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			f.Close()
			testenv.Skipf(t, "%s is dynamically linked: install busybox-static, which a root file system of busybox alone can run", busybox)
		}
	}
	f.Close()
	if applets == nil {
		applets = bareApplets
	}
	h := &bareHost{t: t, root: t.TempDir()}
	for _, d := range []string{"bin", "dev", "tmp", "root", "home/user", "opt"} {
		if err := os.MkdirAll(filepath.Join(h.root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(filepath.Join(h.root, "tmp"), 0o1777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(filepath.Join(h.root, "home/user"), 65534, 65534); err != nil {
		t.Fatal(err)
	}
	h.copy(busybox, "/lib/busybox/busybox")
	switch shell {
	case "busybox":
		// On PATH as itself too: `busybox sha256sum` is what some hosts have.
		h.link("/lib/busybox/busybox", "/bin/busybox")
		h.link("/lib/busybox/busybox", "/bin/sh")
	case "dash":
		h.addHostProgram("dash", "/bin/sh")
	default:
		t.Fatalf("no shell %q: want one of %v", shell, bareShells)
	}
	for _, a := range applets {
		h.link("/lib/busybox/busybox", "/bin/"+a)
	}
	null := filepath.Join(h.root, "dev/null")
	if err := syscall.Mknod(null, syscall.S_IFCHR|0o666, 1<<8|3); err != nil {
		t.Fatalf("mknod /dev/null in the root file system: %v", err)
	}
	if err := os.Chmod(null, 0o666); err != nil {
		t.Fatal(err)
	}
	return h
}

// addHostProgram copies this machine's program name (found on PATH) into
// the root file system at path, with the shared libraries ldd says it
// needs. A missing program is skipped for (failed on CI: it has dash and
// curl).
func (h *bareHost) addHostProgram(name, path string) {
	h.t.Helper()
	prog, err := exec.LookPath(name)
	if err != nil {
		testenv.Skipf(h.t, "no %s to put in the root file system: install it", name)
	}
	out, err := exec.Command("ldd", prog).Output()
	if err != nil && !strings.Contains(string(out), "not a dynamic executable") {
		testenv.Skipf(h.t, "ldd %s: %v: cannot tell which libraries to put beside it", prog, err)
	}
	for _, field := range strings.Fields(string(out)) {
		if strings.HasPrefix(field, "/") {
			h.copy(field, field)
		}
	}
	h.copy(prog, path)
}

// copy copies the host's file from into the root file system at to.
func (h *bareHost) copy(from, to string) {
	h.t.Helper()
	data, err := os.ReadFile(from)
	if err != nil {
		h.t.Fatal(err)
	}
	h.write(to, data, 0o755)
}

// link makes a symbolic link at path to target, both inside the root
// file system.
func (h *bareHost) link(target, path string) {
	h.t.Helper()
	if err := os.Symlink(target, filepath.Join(h.root, path)); err != nil {
		h.t.Fatal(err)
	}
}

// write puts data at path (absolute, inside the root file system).
func (h *bareHost) write(path string, data []byte, mode os.FileMode) {
	h.t.Helper()
	p := filepath.Join(h.root, path)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		h.t.Fatal(err)
	}
	if err := os.WriteFile(p, data, mode); err != nil {
		h.t.Fatal(err)
	}
}

// sh runs script with /bin/sh on the bare host as uid (0: root), in /,
// with HOME /root (root) or /home/user, PATH /usr/local/bin:/bin and env,
// and returns its combined output and exit code.
func (h *bareHost) sh(uid int, env []string, script string) (string, int) {
	h.t.Helper()
	home := "/root"
	if uid != 0 {
		home = "/home/user"
	}
	cmd := exec.Command("/bin/sh", "-c", script)
	cmd.Dir = "/"
	cmd.Env = append([]string{"PATH=/usr/local/bin:/bin", "HOME=" + home}, env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Chroot: h.root}
	if uid != 0 {
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid)}
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	done := make(chan error, 1)
	if err := cmd.Start(); err != nil {
		h.t.Fatalf("start /bin/sh in %s: %v", h.root, err)
	}
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil && cmd.ProcessState == nil {
			h.t.Fatalf("sh -c %q: %v", script, err)
		}
	case <-time.After(2 * time.Minute):
		_ = cmd.Process.Kill()
		<-done
		h.t.Fatalf("sh -c %q still running after 2 minutes:\n%s", script, out.String())
	}
	return out.String(), cmd.ProcessState.ExitCode()
}

// files lists the names in dir (absolute, inside the root file system),
// hidden ones included; none when it does not exist.
func (h *bareHost) files(dir string) []string {
	h.t.Helper()
	entries, err := os.ReadDir(filepath.Join(h.root, dir))
	if err != nil && !os.IsNotExist(err) {
		h.t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

// sum is the SHA-256 of the file at path inside the root file system.
func (h *bareHost) sum(path string) string {
	h.t.Helper()
	data, err := os.ReadFile(filepath.Join(h.root, path))
	if err != nil {
		h.t.Fatal(err)
	}
	return sha256Hex(data)
}

func sha256Hex(data []byte) string {
	s := sha256.Sum256(data)
	return hex.EncodeToString(s[:])
}

// fakeRelease is a release directory whose programs are small shell
// scripts saying which file they are (so the bare host runs them, and
// their --version names their architecture), with SHA256SUMS listing them
// as make release does. tamper, when not empty, is a file whose bytes are
// changed after its sum was written.
func fakeRelease(t *testing.T, tamper string) (dir string, digests map[string]string) {
	t.Helper()
	dir = t.TempDir()
	digests = map[string]string{}
	for _, program := range deploy.Programs {
		for _, arch := range deploy.Arches {
			name := deploy.FileName(program, arch)
			data := []byte("#!/bin/sh\necho '" + program + " version fake-" + arch + "'\n")
			digests[name] = sha256Hex(data)
			if name == tamper {
				data = append(data, "# altered\n"...)
			}
			if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	names := make([]string, 0, len(digests))
	for n := range digests {
		names = append(names, n)
	}
	sort.Strings(names)
	var sums strings.Builder
	for _, n := range names {
		fmt.Fprintf(&sums, "%s  %s\n", digests[n], n)
	}
	if err := os.WriteFile(filepath.Join(dir, deploy.SumsFile), []byte(sums.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir, digests
}

// pipeInstall is the guide's one-liner with busybox's wget: the script
// from the server at url, piped into sh with args. With machine, `uname
// -m` says machine to the script: a shell function piped in before it.
// (Not a uname wrapper earlier on PATH: busybox's sh runs its own uname
// applet whatever PATH holds; both shells call a function first.)
func pipeInstall(url, machine, args string) string {
	get := "wget -qO- " + url + server.DownloadPath + server.InstallScript
	if machine != "" {
		get = `{ echo 'uname() { if [ "$1" = -m ]; then echo ` + machine + `; else command uname "$@"; fi; }'; ` + get + "; }"
	}
	return get + " | sh -s -- " + args
}

// eachShell runs f as a subtest on a fresh bareHost of each of bareShells.
func eachShell(t *testing.T, f func(t *testing.T, h *bareHost)) {
	for _, shell := range bareShells {
		t.Run(shell, func(t *testing.T) { f(t, newBareHost(t, shell, nil)) })
	}
}

// The guide's command (docs/runner.md, the wget line) on a bare host of
// busybox alone installs the release's real knotless-run and knotless-agent
// for this machine's architecture from knotless-server --release-dir, each
// byte for byte the release's, and knotless-run --version then names the
// server's release.
func TestInstall_BringsTheReleasesKnotlessRunOntoABareHost(t *testing.T) {
	h := newBareHost(t, "busybox", nil)
	rel := deployRelease(t)
	w := newWorld(t, 30*time.Second, "--release-dir", rel.Dir)
	var line string
	for _, b := range docBlocks(t, "docs/runner.md") {
		for _, l := range strings.Split(b.text, "\n") {
			if strings.HasPrefix(l, "wget ") && strings.Contains(l, server.InstallScript) {
				line = l
			}
		}
	}
	if line == "" {
		t.Fatal("docs/runner.md has no wget line piping install.sh into sh")
	}
	line = mustReplace(t, line, "https://ci.example.com", w.url)
	out, code := h.sh(0, nil, line)
	if code != 0 {
		t.Fatalf("%s: exit %d:\n%s", line, code, out)
	}
	t.Logf("%s:\n%s", line, out)
	for _, program := range deploy.Programs {
		file := deploy.FileName(program, runtime.GOARCH)
		if got := h.sum("/root/.local/bin/" + program); got != rel.Digests[file] {
			t.Errorf("installed %s has SHA-256 %s, want the release's %s %s", program, got, file, rel.Digests[file])
		}
	}
	if got := h.files("/root/.local/bin"); strings.Join(got, " ") != "knotless-agent knotless-run" {
		t.Errorf("the install directory holds %v, want knotless-agent and knotless-run alone (no temporary directory left)", got)
	}
	want := "knotless-run version " + rel.Version
	if !strings.Contains(out, "knotless-install: "+want) {
		t.Errorf("install.sh's output does not say %q", want)
	}
	if v, code := h.sh(0, nil, "/root/.local/bin/knotless-run --version"); code != 0 || strings.TrimSpace(v) != want {
		t.Errorf("knotless-run --version on the bare host: exit %d, %q; want %q", code, v, want)
	}
}

// A file that does not match the release's sum is refused with its name,
// the digest SHA256SUMS gives and the one it had, and nothing at all is
// installed: not the file before it that matched, not a temporary
// directory.
func TestInstall_RefusesATamperedFileNamingItAndBothDigests(t *testing.T) {
	tampered := deploy.FileName("knotless-agent", "amd64")
	dir, digests := fakeRelease(t, tampered)
	w := newWorld(t, 30*time.Second, "--release-dir", dir)
	altered, err := os.ReadFile(filepath.Join(dir, tampered))
	if err != nil {
		t.Fatal(err)
	}
	eachShell(t, func(t *testing.T, h *bareHost) {
		out, code := h.sh(0, nil, pipeInstall(w.url, "x86_64", "--dir /opt/knotless"))
		if code == 0 {
			t.Fatalf("install.sh installed a tampered %s (exit 0):\n%s", tampered, out)
		}
		for _, want := range []string{
			deploy.FileName("knotless-run", "amd64") + " ok",
			tampered + ": SHA-256 mismatch",
			"says " + digests[tampered],
			"gave " + sha256Hex(altered),
			"nothing installed",
		} {
			if !strings.Contains(out, want) {
				t.Errorf("install.sh's output lacks %q:\n%s", want, out)
			}
		}
		if got := h.files("/opt/knotless"); len(got) != 0 {
			t.Errorf("after a refused file /opt/knotless holds %v, want nothing", got)
		}
	})
}

// On an aarch64 host (uname -m says so) the arm64 files are chosen and
// installed, not the amd64 ones; an x86_64 host gets the amd64 ones.
func TestInstall_PicksTheFilesOfTheHostsArchitecture(t *testing.T) {
	dir, digests := fakeRelease(t, "")
	w := newWorld(t, 30*time.Second, "--release-dir", dir)
	eachShell(t, func(t *testing.T, h *bareHost) {
		for machine, arch := range map[string]string{"aarch64": "arm64", "x86_64": "amd64"} {
			out, code := h.sh(0, nil, pipeInstall(w.url, machine, "--dir /opt/"+machine))
			if code != 0 {
				t.Fatalf("install.sh on %s: exit %d:\n%s", machine, code, out)
			}
			for _, program := range deploy.Programs {
				file := deploy.FileName(program, arch)
				if got := h.sum("/opt/" + machine + "/" + program); got != digests[file] {
					t.Errorf("on %s the installed %s has SHA-256 %s, want %s's %s", machine, program, got, file, digests[file])
				}
			}
			for _, want := range []string{"this host's architecture: linux/" + arch + " (uname -m: " + machine + ")", "knotless-run version fake-" + arch} {
				if !strings.Contains(out, want) {
					t.Errorf("install.sh's output on %s lacks %q:\n%s", machine, want, out)
				}
			}
		}
	})
}

// A machine Knotless has no build for is refused, naming what uname -m
// said, before anything is downloaded or installed: one uname -m names
// (riscv64), and, on an x86_64 machine, the one the kernel itself reports
// under busybox's linux32 (i686).
func TestInstall_RefusesAMachineWithoutABuild(t *testing.T) {
	dir, _ := fakeRelease(t, "")
	w := newWorld(t, 30*time.Second, "--release-dir", dir)
	eachShell(t, func(t *testing.T, h *bareHost) {
		cases := map[string]string{"riscv64": pipeInstall(w.url, "riscv64", "--dir /opt/knotless")}
		if runtime.GOARCH == "amd64" {
			h.link("/lib/busybox/busybox", "/bin/linux32")
			cases["i686"] = "linux32 /bin/sh -c '" + pipeInstall(w.url, "", "--dir /opt/knotless") + "'"
		}
		for machine, cmd := range cases {
			out, code := h.sh(0, nil, cmd)
			if code == 0 || !strings.Contains(out, "this host's architecture is '"+machine+"' (uname -m)") || strings.Contains(out, "fetching") {
				t.Errorf("install.sh on %s: exit %d, want a refusal naming %s before any download:\n%s", machine, code, machine, out)
			}
		}
		if got := h.files("/opt/knotless"); len(got) != 0 {
			t.Errorf("/opt/knotless holds %v, want nothing", got)
		}
	})
}

// KNOTLESS_INSTALL_DIR chooses the directory; --dir, given too, wins over
// it; without either, root gets /usr/local/bin.
func TestInstall_HonoursKnotlessInstallDirAndDir(t *testing.T) {
	dir, digests := fakeRelease(t, "")
	w := newWorld(t, 30*time.Second, "--release-dir", dir)
	run := deploy.FileName("knotless-run", "amd64")
	eachShell(t, func(t *testing.T, h *bareHost) {
		if err := os.MkdirAll(filepath.Join(h.root, "usr/local/bin"), 0o755); err != nil {
			t.Fatal(err)
		}
		for _, c := range []struct {
			env  []string
			args string
			want string
		}{
			{env: []string{"KNOTLESS_INSTALL_DIR=/opt/from-env"}, want: "/opt/from-env"},
			{env: []string{"KNOTLESS_INSTALL_DIR=/opt/not-this"}, args: "--dir /opt/from-flag", want: "/opt/from-flag"},
			{args: "--dir=/opt/equals", want: "/opt/equals"},
			{want: "/usr/local/bin"},
		} {
			out, code := h.sh(0, c.env, pipeInstall(w.url, "x86_64", c.args))
			if code != 0 {
				t.Fatalf("%v install.sh %s: exit %d:\n%s", c.env, c.args, code, out)
			}
			if got := h.sum(c.want + "/knotless-run"); got != digests[run] {
				t.Errorf("%v install.sh %s: %s/knotless-run has SHA-256 %s, want %s", c.env, c.args, c.want, got, digests[run])
			}
		}
		if got := h.files("/opt/not-this"); len(got) != 0 {
			t.Errorf("--dir did not win over KNOTLESS_INSTALL_DIR: /opt/not-this holds %v", got)
		}
	})
}

// The guide's curl line works where the host has curl and no wget (dash,
// curl and their libraries, busybox's tools but wget): the script fetches
// with curl.
func TestInstall_FetchesWithCurlWhereThereIsNoWget(t *testing.T) {
	dir, digests := fakeRelease(t, "")
	w := newWorld(t, 30*time.Second, "--release-dir", dir)
	h := newBareHost(t, "dash", []string{"uname", "sha256sum", "mkdir", "chmod", "mv", "rm"})
	h.addHostProgram("curl", "/bin/curl")
	var line string
	for _, b := range docBlocks(t, "docs/runner.md") {
		for _, l := range strings.Split(b.text, "\n") {
			if strings.HasPrefix(l, "curl ") && strings.Contains(l, server.InstallScript) {
				line = l
			}
		}
	}
	if line == "" {
		t.Fatal("docs/runner.md has no curl line piping install.sh into sh")
	}
	line = mustReplace(t, line, "https://ci.example.com", w.url)
	out, code := h.sh(0, nil, line)
	if code != 0 {
		t.Fatalf("%s: exit %d:\n%s", line, code, out)
	}
	file := deploy.FileName("knotless-run", runtime.GOARCH)
	if got := h.sum("/root/.local/bin/knotless-run"); got != digests[file] {
		t.Errorf("installed knotless-run has SHA-256 %s, want %s's %s", got, file, digests[file])
	}
}

// Where install.sh cannot work it says why, and what to do, and installs
// nothing: no curl and no wget; a directory the user may not write; no
// directory of the user's on PATH; no server to name. --help says how to
// choose the directory and the server.
func TestInstall_SaysWhyItCannotInstall(t *testing.T) {
	dir, _ := fakeRelease(t, "")
	w := newWorld(t, 30*time.Second, "--release-dir", dir)
	resp, err := http.Get(w.url + server.DownloadPath + server.InstallScript)
	if err != nil {
		t.Fatal(err)
	}
	script, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET install.sh: %d %s", resp.StatusCode, script)
	}

	// dash: busybox's own sh finds its wget applet whatever PATH holds.
	noFetch := newBareHost(t, "dash", []string{"uname", "sha256sum", "mkdir", "chmod", "mv", "rm"})
	noFetch.write("/install.sh", script, 0o644)
	out, code := noFetch.sh(0, nil, "sh /install.sh --dir /opt/knotless")
	if code == 0 || !strings.Contains(out, "neither curl nor wget is installed") {
		t.Errorf("without curl or wget: exit %d, want a refusal saying so:\n%s", code, out)
	}

	eachShell(t, func(t *testing.T, h *bareHost) {
		h.write("/install.sh", script, 0o644)
		if err := os.MkdirAll(filepath.Join(h.root, "opt/root-only"), 0o755); err != nil {
			t.Fatal(err)
		}
		out, code := h.sh(65534, nil, "sh /install.sh --dir /opt/root-only")
		if code == 0 || !strings.Contains(out, "/opt/root-only is not writable by you") {
			t.Errorf("into a directory of root's as uid 65534: exit %d, want a refusal naming it:\n%s", code, out)
		}
		if got := h.files("/opt/root-only"); len(got) != 0 {
			t.Errorf("/opt/root-only holds %v, want nothing", got)
		}
		out, code = h.sh(65534, nil, "sh /install.sh")
		if code == 0 || !strings.Contains(out, "give one with --dir DIR") {
			t.Errorf("as a user without a directory of theirs on PATH: exit %d, want a refusal asking for --dir:\n%s", code, out)
		}

		h.write("/bare.sh", server.InstallScriptSource(), 0o644)
		out, code = h.sh(0, nil, "sh /bare.sh --dir /opt/knotless")
		if code == 0 || !strings.Contains(out, "no server: give --server URL") {
			t.Errorf("the repository's script, which names no server, without --server: exit %d, want a refusal asking for it:\n%s", code, out)
		}
		out, code = h.sh(0, nil, "sh /bare.sh --server "+w.url+" --dir /opt/knotless")
		if code != 0 || !strings.Contains(out, "installed /opt/knotless/knotless-run") {
			t.Errorf("the repository's script with --server: exit %d, want an install:\n%s", code, out)
		}

		out, code = h.sh(0, nil, "sh /install.sh --help")
		for _, want := range []string{"--dir DIR", "KNOTLESS_INSTALL_DIR", "--server URL", "KNOTLESS_SERVER", w.url, "SHA256SUMS"} {
			if code != 0 || !strings.Contains(out, want) {
				t.Errorf("install.sh --help: exit %d, lacks %q:\n%s", code, want, out)
			}
		}
	})
}
