package runner

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"time"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/cleanup"
	"knotless.dev/knotless/internal/workflow"
)

// Mirrors keeps one bare git repository per server repository under Root
// (Root/OWNER/NAME.git) and checks commits out of them into workspaces. It
// fetches a commit by its exact SHA and only when the mirror lacks it. Safe
// for concurrent use: runs of one repository take turns on its mirror.
//
// A workspace is self-contained: a clone of the mirror whose object files
// are hard links to the mirror's (immutable) ones, or copies where the two
// are on different file systems, never alternates. Its .git needs nothing
// outside it, so it can be copied into a container or a pod and outlives
// the mirror.
type Mirrors struct {
	Root string

	mu    sync.Mutex
	locks map[string]*sync.Mutex
}

// Fetch describes where a commit comes from and what the checkout holds.
type Fetch struct {
	Repo  string // OWNER/NAME
	URL   string // the repository's smart-HTTP URL; the workspace's origin (without any credential)
	SHA   string // full commit SHA
	Token string // run token, sent as the basic-auth password; never in argv; "" sends none
	// Ref is the run's full ref. For a branch (refs/heads/B) HEAD is on
	// branch B at SHA, tracking origin/B; otherwise HEAD is detached. When
	// set, the server's branches and tags are read (and their objects the
	// mirror lacks fetched), and the checkout gets origin/* for every
	// branch of the server.
	Ref string
	// Checkout is the workflow's checkout: section (depth, tags,
	// submodules); the zero value is a detached checkout with no tags.
	Checkout workflow.Checkout

	// mirror, when set, is the mirror's directory (a submodule on another
	// host has no OWNER/NAME here); else Mirrors.Path(Repo).
	mirror string
}

var (
	shaRE = regexp.MustCompile(`^[0-9a-f]{40}([0-9a-f]{24})?$`)
)

// lock returns the lock of the mirror at directory mirror.
func (m *Mirrors) lock(mirror string) *sync.Mutex {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.locks == nil {
		m.locks = map[string]*sync.Mutex{}
	}
	l := m.locks[mirror]
	if l == nil {
		l = &sync.Mutex{}
		m.locks[mirror] = l
	}
	return l
}

// Path returns the mirror's directory for repo ("OWNER/NAME").
func (m *Mirrors) Path(repo string) (string, error) {
	// The server's names follow api.CheckRepo; a name that does not
	// could leave Root.
	if err := api.CheckRepo(repo); err != nil {
		return "", err
	}
	owner, name, _ := strings.Cut(repo, "/")
	rel := filepath.Join(owner, name+".git")
	if !filepath.IsLocal(rel) {
		return "", fmt.Errorf("repository %q: its mirror would leave %s", repo, m.Root)
	}
	return filepath.Join(m.Root, rel), nil
}

// Checkout makes dest (which must not exist, or be empty) a self-contained
// checkout of f.SHA with origin f.URL (any user name or password in it
// removed), fetching the commit into the repository's mirror first if it
// is missing. With f.Ref, HEAD is on the run's branch (or detached at a
// tag's commit), origin/* names the server's branches and, as
// f.Checkout.Tags says, refs/tags/* its tags; f.Checkout.Depth makes a
// shallow checkout and f.Checkout.Submodules checks submodules out too
// (submodules.go). git's output goes to log. The run token never reaches
// dest.
func (m *Mirrors) Checkout(ctx context.Context, f Fetch, dest string, log io.Writer) error {
	if !shaRE.MatchString(f.SHA) {
		return fmt.Errorf("commit %q is not a full SHA", f.SHA)
	}
	if f.Ref != "" && (strings.ContainsAny(f.Ref, "\n\x00 ~^:?*[\\") || !strings.HasPrefix(f.Ref, "refs/")) {
		return fmt.Errorf("ref %q is not a full branch or tag name", f.Ref)
	}
	if err := m.checkout(ctx, f, dest, log); err != nil {
		return err
	}
	if f.Checkout.Submodules != workflow.SubmodulesNone {
		return m.submodules(ctx, f, dest, log)
	}
	return nil
}

// checkout is Checkout without the submodules, holding the mirror's lock.
func (m *Mirrors) checkout(ctx context.Context, f Fetch, dest string, log io.Writer) error {
	mirror := f.mirror
	if mirror == "" {
		var err error
		if mirror, err = m.Path(f.Repo); err != nil {
			return err
		}
	}
	l := m.lock(mirror)
	l.Lock()
	defer l.Unlock()

	if !mirrorMade(mirror) {
		if err := makeMirror(ctx, mirror, log); err != nil {
			return fmt.Errorf("create mirror of %s: %w", f.Repo, err)
		}
	}
	shallow := f.Checkout.Depth > 0
	// The workspace's .git, with links to the objects the mirror has, is
	// made while the commit is fetched; what the fetches bring is linked
	// after. A shallow checkout gets its objects from the mirror by a
	// shallow fetch instead.
	gitDir := make(chan error, 1)
	go func() { gitDir <- makeGitDir(mirror, dest, f.SHA, withoutCredential(f.URL), !shallow) }()
	fetched := !hasObject(mirror, f.SHA)
	if fetched {
		fmt.Fprintf(log, "fetching %s from %s\n", f.SHA, withoutCredential(f.URL))
		if err := m.fetch(ctx, mirror, f, log); err != nil {
			<-gitDir
			_ = cleanup.RemoveAll(filepath.Join(dest, ".git"), nil)
			return err
		}
	} else {
		fmt.Fprintf(log, "commit %s is in the mirror already\n", f.SHA)
	}
	var refs []ref
	if f.Ref != "" {
		var more bool
		refs, more = serverRefs(ctx, mirror, f, log)
		fetched = fetched || more
	}
	fmt.Fprintf(log, "checking out %s\n", f.SHA)
	err := <-gitDir
	if err == nil && fetched && !shallow {
		err = linkTree(filepath.Join(mirror, "objects"), filepath.Join(dest, ".git", "objects"))
	}
	if err == nil && shallow && refs != nil {
		var tags []ref
		for _, r := range refs {
			if wanted(f, r) {
				tags = append(tags, r)
			}
		}
		err = mirrorTags(ctx, mirror, tags)
	}
	if err == nil && shallow {
		err = shallowFetch(ctx, mirror, dest, f, log)
	}
	if err == nil {
		err = writeWorkspaceRefs(dest, f, refs)
	}
	if err != nil {
		return fmt.Errorf("create workspace of %s: %w", f.Repo, err)
	}
	// As clone's own checkout: the index and every file from HEAD's tree
	// (no HEAD update, hence no reflog entry; HEAD is the commit already).
	if err := git(ctx, dest, nil, log, "read-tree", "--reset", "-u", "HEAD"); err != nil {
		return fmt.Errorf("check out %s: %w", f.SHA, err)
	}
	if packs(mirror) > maxPacks {
		go m.repack(mirror)
	}
	return nil
}

// mirrorMade reports whether mirror is a whole bare repository: makeMirror
// renames it into place only once it is, but a runner before that made it
// in place, and a setup stopped in the middle (a run handed over to the
// next runner process, a cancel) left HEAD without objects/ or config.
func mirrorMade(mirror string) bool {
	for _, name := range []string{"HEAD", "config", filepath.Join("objects", "pack"), "refs"} {
		if _, err := os.Stat(filepath.Join(mirror, name)); err != nil {
			return false
		}
	}
	return true
}

// makeMirror makes mirror an empty bare repository without automatic gc
// (it would repack in the middle of a run's fetch; workspaces hold hard
// links or copies of the object files, so a repack would not break them).
// It makes it next to mirror and renames it into place, so a process
// stopped at any point leaves a whole mirror or none; what an earlier
// one left half made is removed first. Errors are git's or the file
// system's.
func makeMirror(ctx context.Context, mirror string, log io.Writer) error {
	if err := os.MkdirAll(filepath.Dir(mirror), 0o700); err != nil {
		return err
	}
	if err := cleanup.RemoveAll(mirror, nil); err != nil {
		return err
	}
	prefix := filepath.Join(filepath.Dir(mirror), "."+filepath.Base(mirror)+".making-")
	// A process killed while it made one left this (a minute is far
	// longer than two git commands take).
	left, _ := filepath.Glob(prefix + "*")
	for _, dir := range left {
		if fi, err := os.Stat(dir); err == nil && time.Since(fi.ModTime()) > time.Minute {
			_ = cleanup.RemoveAll(dir, nil)
		}
	}
	tmp, err := os.MkdirTemp(filepath.Dir(prefix), filepath.Base(prefix))
	if err != nil {
		return err
	}
	defer cleanup.RemoveAll(tmp, nil) // gone once renamed
	if err := git(ctx, "", nil, log, "init", "-q", "--bare", tmp); err != nil {
		return err
	}
	if err := git(ctx, tmp, nil, log, "config", "gc.auto", "0"); err != nil {
		return err
	}
	if err := os.Rename(tmp, mirror); err != nil && !mirrorMade(mirror) {
		return err
	}
	return nil // made here, or by another process on this work directory just now
}

// maxPacks is how many packs a mirror gathers (one per fetch) before they
// are made one, after a checkout and outside it.
const maxPacks = 50

func packs(mirror string) int {
	p, _ := filepath.Glob(filepath.Join(mirror, "objects", "pack", "pack-*.pack"))
	return len(p)
}

// repack makes the mirror's packs one, holding the mirror's lock. Object
// lookups slow down with many packs, and each workspace links every pack.
// Workspaces made before keep their links to the old packs' files.
func (m *Mirrors) repack(mirror string) {
	l := m.lock(mirror)
	l.Lock()
	defer l.Unlock()
	if packs(mirror) <= maxPacks {
		return // another repack came first
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	_ = git(ctx, mirror, nil, io.Discard, "repack", "-a", "-d", "-q")
}

// fetch gets f.SHA into mirror: over HTTP in one request (fetchPack), else
// (another URL, or that failed) with `git fetch`. Fetched objects stay in
// packs (a workspace links a few pack files, not one file per object).
func (m *Mirrors) fetch(ctx context.Context, mirror string, f Fetch, log io.Writer) error {
	if f.Token != "" && (strings.HasPrefix(f.URL, "http://") || strings.HasPrefix(f.URL, "https://")) {
		err := fetchPack(ctx, mirror, f.URL, f.SHA, f.Token)
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("fetch %s of %s: %w", f.SHA, f.Repo, ctx.Err())
		}
		if errors.Is(err, errRefused) {
			// git fetch would be refused too, with a vaguer message.
			return fmt.Errorf("fetch %s of %s: %w", f.SHA, f.Repo, err)
		}
		fmt.Fprintf(log, "fetching in one request failed (%v); trying git fetch\n", err)
	}
	env := authEnv(f.Token)
	// The ref keeps the commit reachable and gives later fetches a
	// "have" to negotiate from.
	refspec := f.SHA + ":refs/knotless/" + f.SHA
	if err := git(ctx, mirror, env, log, "-c", "fetch.unpackLimit=1", "-c", "maintenance.auto=false",
		"fetch", "--no-tags", "--no-write-fetch-head", "-q", f.URL, refspec); err != nil {
		return fmt.Errorf("fetch %s of %s: %w", f.SHA, f.Repo, err)
	}
	return nil
}

// authEnv is the environment that makes git send token as the basic-auth
// password (none when token is ""): configuration in the environment,
// never in argv or a file.
func authEnv(token string) []string {
	if token == "" {
		return nil
	}
	auth := base64.StdEncoding.EncodeToString([]byte("knotless-run:" + token))
	return []string{
		"GIT_CONFIG_COUNT=1",
		"GIT_CONFIG_KEY_0=http.extraHeader",
		"GIT_CONFIG_VALUE_0=Authorization: Basic " + auth,
	}
}

// withoutCredential is raw with any user name and password taken out.
func withoutCredential(raw string) string {
	u, err := url.Parse(raw)
	switch {
	case err == nil && u.User == nil:
		return raw
	case err == nil:
		u.User = nil
		return u.String()
	}
	// Unparsable: cut what lies between "://" and the host by hand.
	scheme, rest, ok := strings.Cut(raw, "://")
	if !ok {
		return raw
	}
	host, path, slash := strings.Cut(rest, "/")
	if i := strings.LastIndexByte(host, '@'); i >= 0 {
		host = host[i+1:]
	}
	if slash {
		path = "/" + path
	}
	return scheme + "://" + host + path
}

// git runs one git command in dir ("" = the current directory) with extra
// environment entries (gitEnv), writing its output to out.
func git(ctx context.Context, dir string, extra []string, out io.Writer, args ...string) error {
	if dir != "" {
		args = append([]string{"-C", dir}, args...)
	}
	cmd := exec.CommandContext(ctx, "git", args...)
	cmd.Env = gitEnv(extra)
	var buf bytes.Buffer
	cmd.Stdout, cmd.Stderr = &buf, &buf
	err := cmd.Run()
	if buf.Len() > 0 {
		_, _ = out.Write(buf.Bytes())
	}
	if err != nil {
		if msg := strings.TrimSpace(lastLine(buf.String())); msg != "" {
			return fmt.Errorf("git %s: %w: %s", subcommand(args), err, msg)
		}
		return fmt.Errorf("git %s: %w", subcommand(args), err)
	}
	return nil
}

// gitEnv is the environment of the git processes the runner starts: its
// own minus any GIT_* variable but the certificate authorities
// (GIT_SSL_CAINFO, GIT_SSL_CAPATH), plus GIT_TERMINAL_PROMPT=0 (git never
// asks for a password), plus extra. git trusts what the runner trusts:
// without GIT_SSL_CAINFO, SSL_CERT_FILE (the CA file Go's TLS, hence the
// runner's own requests, reads) becomes GIT_SSL_CAINFO, since git's TLS
// library does not read SSL_CERT_FILE itself; a server whose certificate
// a private CA signed is then fetched from by git as by the runner.
func gitEnv(extra []string) []string {
	env := []string{"GIT_TERMINAL_PROMPT=0", "GIT_ASKPASS=true", "LC_ALL=C"}
	caInfo := false
	for _, kv := range os.Environ() {
		switch name, _, _ := strings.Cut(kv, "="); {
		case name == "GIT_SSL_CAINFO" || name == "GIT_SSL_CAPATH":
			caInfo = caInfo || name == "GIT_SSL_CAINFO"
			env = append(env, kv)
		case !strings.HasPrefix(kv, "GIT_") && name != "LC_ALL":
			env = append(env, kv)
		}
	}
	if f := os.Getenv("SSL_CERT_FILE"); f != "" && !caInfo {
		env = append(env, "GIT_SSL_CAINFO="+f)
	}
	return append(env, extra...)
}

// subcommand is the first argument of a git command line that is not an
// option (or an option's value), for messages.
func subcommand(args []string) string {
	for i := 0; i < len(args); i++ {
		switch {
		case args[i] == "-C" || args[i] == "-c":
			i++
		case !strings.HasPrefix(args[i], "-"):
			return args[i]
		}
	}
	return ""
}

func lastLine(s string) string {
	s = strings.TrimRight(s, "\n")
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return s[i+1:]
	}
	return s
}
