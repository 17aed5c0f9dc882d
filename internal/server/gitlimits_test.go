package server_test

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/server"
	"knotless.dev/knotless/internal/server/servertest"
	"knotless.dev/knotless/internal/testwait"
)

// The tests of this file send hostile git traffic (bodies too large,
// chunked without end, stalled mid-body) and are not parallel: each
// measures the process's memory and descriptors (the server runs in it,
// its git processes are its children) while no other test runs.

// attackBudget is what the server may take beyond its idle state while
// one attack runs.
const (
	rssBudget = 64 << 20
	fdBudget  = 16
)

// meter watches the server while an attack runs: its RSS (serverRSS),
// DATA/tmp's size, and how long a normal client
// waits for an answer (an XRPC query every 50 ms).
type meter struct {
	t       *testing.T
	tmp     string
	baseRSS int64
	baseFDs int

	mu      sync.Mutex
	maxRSS  int64
	maxTmp  int64
	slowest time.Duration
	stop    chan struct{}
	done    chan struct{}
}

func startMeter(t *testing.T, f *fixture) *meter {
	t.Helper()
	m := &meter{t: t, tmp: filepath.Join(f.DataDir, server.TmpDir), baseRSS: serverRSS(f.DataDir), baseFDs: openFDs(t),
		stop: make(chan struct{}), done: make(chan struct{})}
	client := f.alice()
	go func() {
		defer close(m.done)
		for {
			start := time.Now()
			var out api.Account
			err := client.Query(context.Background(), api.MethodWhoAmI, nil, &out)
			took := time.Since(start)
			rss, tmp := serverRSS(f.DataDir), dirBytes(m.tmp)
			m.mu.Lock()
			if err != nil {
				took = time.Hour
			}
			m.slowest, m.maxRSS, m.maxTmp = max(m.slowest, took), max(m.maxRSS, rss), max(m.maxTmp, tmp)
			m.mu.Unlock()
			select {
			case <-m.stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
	}()
	return m
}

// end stops the meter, logs what it saw and fails the test past the
// budgets: RSS, a normal client's wait (a second), spooled bytes
// (maxSpool), and descriptors once the attack's connections closed.
func (m *meter) end(what string, maxSpool int64) {
	m.t.Helper()
	close(m.stop)
	<-m.done
	fds := 0
	deadline := time.Now().Add(5 * time.Second)
	for {
		if fds = openFDs(m.t); fds <= m.baseFDs+fdBudget || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	m.t.Logf("%s: RSS %d MiB (idle %d MiB), DATA/tmp at most %d KiB, slowest normal answer %s, descriptors %d (idle %d)",
		what, m.maxRSS>>20, m.baseRSS>>20, m.maxTmp>>10, m.slowest.Round(time.Millisecond), fds, m.baseFDs)
	if m.maxRSS > m.baseRSS+rssBudget {
		m.t.Errorf("%s: RSS reached %d MiB, over idle %d MiB + %d MiB", what, m.maxRSS>>20, m.baseRSS>>20, rssBudget>>20)
	}
	if m.slowest > time.Second {
		m.t.Errorf("%s: a normal client waited %s for an answer, want under a second", what, m.slowest)
	}
	if m.maxTmp > maxSpool {
		m.t.Errorf("%s: DATA/tmp held %d bytes, want at most %d", what, m.maxTmp, maxSpool)
	}
	if fds > m.baseFDs+fdBudget {
		m.t.Errorf("%s: %d descriptors open after it, %d before", what, fds, m.baseFDs)
	}
}

// serverRSS is the resident memory of the server: this process (the test
// client's goroutines are a small part of it) and the git processes it
// started for the data directory dataDir, with their descendants. The
// tests' own git clients are not counted.
func serverRSS(dataDir string) int64 {
	n := rss(os.Getpid())
	for _, c := range children(os.Getpid()) {
		cwd, _ := os.Readlink(fmt.Sprintf("/proc/%d/cwd", c))
		argv, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", c))
		if strings.HasPrefix(cwd, dataDir) || strings.Contains(string(argv), dataDir) {
			n += treeRSS(c)
		}
	}
	return n
}

// treeRSS is the resident memory of process pid and its descendants.
func treeRSS(pid int) int64 {
	n := rss(pid)
	for _, c := range children(pid) {
		n += treeRSS(c)
	}
	return n
}

func rss(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}

func children(pid int) []int {
	var out []int
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", pid))
	for _, task := range tasks {
		b, _ := os.ReadFile(task)
		for _, c := range strings.Fields(string(b)) {
			if child, err := strconv.Atoi(c); err == nil {
				out = append(out, child)
			}
		}
	}
	return out
}

// dirBytes is the size of the files under dir.
func dirBytes(dir string) int64 {
	var n int64
	_ = filepath.Walk(dir, func(_ string, fi os.FileInfo, err error) error {
		if err == nil && fi.Mode().IsRegular() {
			n += fi.Size()
		}
		return nil
	})
	return n
}

// rawGitPost opens a connection and sends the head of a POST to path
// authenticated with token; the body follows chunked unless length >= 0.
// The answer is read as it comes; answer returns it once the server ended
// it or closed the connection.
func rawGitPost(t *testing.T, f *fixture, path, token, contentType string, length int64) (net.Conn, func() string) {
	t.Helper()
	conn, err := net.Dial("tcp", f.Addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	te := "Transfer-Encoding: chunked"
	if length >= 0 {
		te = "Content-Length: " + strconv.FormatInt(length, 10)
	}
	auth := base64.StdEncoding.EncodeToString([]byte("x:" + token))
	if _, err := fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: %s\r\nAuthorization: Basic %s\r\nContent-Type: %s\r\n%s\r\n\r\n",
		path, f.Addr, auth, contentType, te); err != nil {
		t.Fatal(err)
	}
	answer := make(chan string, 1)
	go func() {
		b, _ := io.ReadAll(conn)
		answer <- string(b)
	}()
	return conn, func() string {
		select {
		case a := <-answer:
			return a
		case <-time.After(10 * time.Second):
			t.Fatalf("no answer to POST %s within 10 s", path)
			return ""
		}
	}
}

func writeChunk(w io.Writer, p []byte) error {
	_, err := fmt.Fprintf(w, "%x\r\n%s\r\n", len(p), p)
	return err
}

func pkt(s string) string { return fmt.Sprintf("%04x%s", len(s)+4, s) }

// sendUntilCut writes chunks of next() until the server stops taking
// them or limit bytes went, and returns how many bytes went.
func sendUntilCut(conn net.Conn, limit int64, next func() []byte) int64 {
	var sent int64
	for sent < limit {
		p := next()
		_ = conn.SetWriteDeadline(time.Now().Add(5 * time.Second))
		if err := writeChunk(conn, p); err != nil {
			break
		}
		sent += int64(len(p))
	}
	return sent
}

// haves is a chunk of "have" lines of random ids: what a fetch request
// without end looks like.
func haves() []byte {
	var b strings.Builder
	id := make([]byte, 20)
	for b.Len() < 64<<10 {
		rand.Read(id)
		b.WriteString(pkt("have " + hex.EncodeToString(id) + "\n"))
	}
	return []byte(b.String())
}

const attackBytes = 64 << 20 // what an attack sends at most

// TestServer_ChunkedUploadPackBodyIsCutAtItsCap pins item 7 for fetches:
// a run token's chunked git-upload-pack body without end (want, then
// haves forever) is cut at --max-fetch-request and answered with git's
// error naming the flag; nothing is spooled.
func TestServer_ChunkedUploadPackBodyIsCutAtItsCap(t *testing.T) {
	const limit = 1 << 20
	f := newFixture(t, servertest.Options{MaxFetchRequest: limit})
	_, c := claimedRun(t, f)
	m := startMeter(t, f)
	conn, answer := rawGitPost(t, f, "/alice/app.git/git-upload-pack", c.RunToken, "application/x-git-upload-pack-request", -1)
	head := pkt("want "+c.Run.SHA+" side-band-64k ofs-delta\n") + "0000"
	first := true
	sent := sendUntilCut(conn, attackBytes, func() []byte {
		if first {
			first = false
			return []byte(head)
		}
		return haves()
	})
	got := answer()
	m.end("chunked upload-pack body without end", 0)
	t.Logf("sent %d MiB before the server cut the body", sent>>20)
	if sent >= attackBytes {
		t.Errorf("the server took all %d MiB of a fetch request capped at %d", sent>>20, limit)
	}
	if !strings.Contains(got, "ERR fetch request larger than 1 MiB") || !strings.Contains(got, "--max-fetch-request") {
		t.Errorf("answer %q does not say the fetch request is over --max-fetch-request", got)
	}
	// The run goes on: its token still fetches its commit.
	if out, err := fetchBySHA(t, f, c.RunToken, c.Run.SHA, "0"); err != nil {
		t.Errorf("the run's own fetch after the attack: %v\n%s", err, out)
	}
}

// TestServer_FetchRequestWithContentLengthOverItsCapIsRefusedUnread pins
// that a fetch whose Content-Length is over the cap is answered at once,
// without its body.
func TestServer_FetchRequestWithContentLengthOverItsCapIsRefusedUnread(t *testing.T) {
	f := newFixture(t, servertest.Options{MaxFetchRequest: 1 << 20})
	_, c := claimedRun(t, f)
	_, answer := rawGitPost(t, f, "/alice/app.git/git-upload-pack", c.RunToken, "application/x-git-upload-pack-request", 1<<40)
	if got := answer(); !strings.Contains(got, "200 OK") || !strings.Contains(got, "--max-fetch-request") {
		t.Errorf("answer %q does not refuse with --max-fetch-request", got)
	}
}

// TestServer_ChunkedBodyToAnotherGitPathIsNotSpooled pins that a body
// sent to any git path but the smart-HTTP services (once spooled whole to
// DATA/tmp for git http-backend) is refused without being read.
func TestServer_ChunkedBodyToAnotherGitPathIsNotSpooled(t *testing.T) {
	f := newFixture(t, servertest.Options{})
	_, c := claimedRun(t, f)
	m := startMeter(t, f)
	junk := make([]byte, 64<<10)
	for _, path := range []string{"/alice/app.git/HEAD", "/alice/app.git/info/refs", "/alice/app.git/objects/info/packs"} {
		conn, answer := rawGitPost(t, f, path, c.RunToken, "application/octet-stream", -1)
		sent := sendUntilCut(conn, attackBytes/4, func() []byte { return junk })
		got := answer()
		if sent >= attackBytes/4 {
			t.Errorf("POST %s: the server took all %d MiB", path, sent>>20)
		}
		if !strings.Contains(got, "404 Not Found") || !strings.Contains(got, "smart HTTP") {
			t.Errorf("POST %s: answer %q, want 404 naming smart HTTP", path, got)
		}
	}
	m.end("chunked bodies to dumb-HTTP paths", 0)
	if out, err := fetchBySHA(t, f, c.RunToken, c.Run.SHA, "0"); err != nil {
		t.Errorf("the run's own fetch after the attack: %v\n%s", err, out)
	}
}

// bigWorkTree is a work tree on main whose one commit holds n random
// (incompressible) bytes.
func bigWorkTree(t *testing.T, n int) string {
	t.Helper()
	dir := servertest.WorkTree(t, map[string]string{"README": "hello\n"})
	big := make([]byte, n)
	rand.Read(big)
	if err := os.WriteFile(filepath.Join(dir, "big.bin"), big, 0o644); err != nil {
		t.Fatal(err)
	}
	servertest.Git(t, dir, "add", "big.bin")
	servertest.Git(t, dir, "commit", "-q", "-m", "big")
	return dir
}

// pushErr is PushDir that returns git's output and error.
func pushErr(t *testing.T, f *fixture, dir, repo string, refspecs ...string) (string, error) {
	t.Helper()
	return servertest.GitErr(t, dir, append([]string{"push", f.GitURL(repo, f.token)}, refspecs...)...)
}

// waitEmpty polls until dir holds no file.
func waitEmpty(t *testing.T, dir string) {
	t.Helper()
	testwait.For(t, 5*time.Second, dir+" to be empty", func() bool {
		ents, err := os.ReadDir(dir)
		return err == nil && len(ents) == 0
	})
}

// TestServer_PushOverMaxPushSizeIsRefusedNamingTheFlag pins item 7 for
// pushes: git push of a pack over --max-push-size (chunked, as git sends
// large packs) fails with git showing the server's message; nothing stays
// in DATA/tmp and the repository is unchanged; a small push then works.
func TestServer_PushOverMaxPushSizeIsRefusedNamingTheFlag(t *testing.T) {
	f := newFixture(t, servertest.Options{MaxPushSize: 1 << 20})
	dir := bigWorkTree(t, 3<<20)
	m := startMeter(t, f)
	out, err := pushErr(t, f, dir, f.repo, "main")
	m.end("push over --max-push-size", 2<<20)
	if err == nil || !strings.Contains(out, "larger than 1 MiB") || !strings.Contains(out, "--max-push-size") {
		t.Fatalf("push of 3 MiB with a 1 MiB cap: err %v, want the server's message naming --max-push-size:\n%s", err, out)
	}
	t.Logf("git says:\n%s", out)
	waitEmpty(t, filepath.Join(f.DataDir, server.TmpDir))
	if out, err := servertest.GitErr(t, "", "ls-remote", f.GitURL(f.repo, f.token)); err != nil || out != "" {
		t.Fatalf("refs after a refused push: %q, %v; want none", out, err)
	}
	small := servertest.WorkTree(t, map[string]string{"README": "small\n"})
	f.push(t, small, "main")
}

// TestServer_PushWithContentLengthOverItsCapIsRefusedBeforeItsPack pins
// that a push saying it is too large is answered at once, from its
// command list alone, with git's report naming the flag.
func TestServer_PushWithContentLengthOverItsCapIsRefusedBeforeItsPack(t *testing.T) {
	f := newFixture(t, servertest.Options{MaxPushSize: 1 << 20})
	m := startMeter(t, f)
	conn, answer := rawGitPost(t, f, "/alice/app.git/git-receive-pack", f.token, "application/x-git-receive-pack-request", 1<<40)
	zero := strings.Repeat("0", 40)
	cmd := pkt(zero+" "+strings.Repeat("1", 40)+" refs/heads/main\x00report-status side-band-64k\n") + "0000PACK"
	if _, err := io.WriteString(conn, cmd); err != nil {
		t.Fatal(err)
	}
	got := answer()
	m.end("push with a Content-Length of 1 TiB", 0)
	for _, want := range []string{"200 OK", "unpack push refused", "--max-push-size", "ng refs/heads/main"} {
		if !strings.Contains(got, want) {
			t.Errorf("answer %q lacks %q", got, want)
		}
	}
}

// TestServer_PushSpoolIsRemovedWhenThePusherHangsUpMidBody pins that a
// push cut off by its client leaves nothing in DATA/tmp.
func TestServer_PushSpoolIsRemovedWhenThePusherHangsUpMidBody(t *testing.T) {
	f := newFixture(t, servertest.Options{})
	tmp := filepath.Join(f.DataDir, server.TmpDir)
	conn, _ := rawGitPost(t, f, "/alice/app.git/git-receive-pack", f.token, "application/x-git-receive-pack-request", -1)
	zero := strings.Repeat("0", 40)
	junk := make([]byte, 64<<10)
	rand.Read(junk)
	if err := writeChunk(conn, []byte(pkt(zero+" "+strings.Repeat("1", 40)+" refs/heads/main\x00report-status\n")+"0000PACK")); err != nil {
		t.Fatal(err)
	}
	for range 32 {
		if err := writeChunk(conn, junk); err != nil {
			t.Fatal(err)
		}
	}
	testwait.For(t, 5*time.Second, "the push to be spooled", func() bool { return dirBytes(tmp) >= 2<<20 })
	conn.Close()
	waitEmpty(t, tmp)
}

// TestServer_PushOverTheRepositorysQuotaIsRefused pins the quota: a push
// that would take the repository past --repo-quota is refused, naming it;
// the repository keeps what it had.
func TestServer_PushOverTheRepositorysQuotaIsRefused(t *testing.T) {
	f := newFixture(t, servertest.Options{RepoQuota: 4 << 20})
	first := bigWorkTree(t, 2<<20)
	f.push(t, first, "main")
	head := servertest.Git(t, first, "rev-parse", "HEAD")
	second := bigWorkTree(t, 3<<20)
	out, err := pushErr(t, f, second, f.repo, "main:refs/heads/more")
	if err == nil || !strings.Contains(out, "quota") || !strings.Contains(out, "--repo-quota") || !strings.Contains(out, "alice/app") {
		t.Fatalf("push past the quota: err %v, want the server's message naming alice/app and --repo-quota:\n%s", err, out)
	}
	t.Logf("git says:\n%s", out)
	refs, _ := servertest.GitErr(t, "", "ls-remote", f.GitURL(f.repo, f.token))
	if strings.Contains(refs, "refs/heads/more") || !strings.Contains(refs, head+"\trefs/heads/main") {
		t.Fatalf("refs after a refused push:\n%s", refs)
	}
	waitEmpty(t, filepath.Join(f.DataDir, server.TmpDir))
}

// TestServer_StalledPushBlocksNoOtherPushNorFetch pins item 8: a push
// stalled mid-body (its pack not all there) holds no lock, so a push to
// another tenant's repository whose id is equal modulo 64 (the old lock
// stripes), a push to its own repository and a fetch of it all finish
// within a second.
func TestServer_StalledPushBlocksNoOtherPushNorFetch(t *testing.T) {
	f := newFixture(t, servertest.Options{})
	bob := f.CreateAccount(t, "bob")
	// alice/app is repository 1: bob's 64th is 65.
	var wg sync.WaitGroup
	sem := make(chan struct{}, 4)
	for i := 1; i <= 64; i++ {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			var out api.Repo
			if err := f.Client(bob).Procedure(context.Background(), api.MethodCreateRepo,
				api.CreateRepoInput{Repo: fmt.Sprintf("r%d", i)}, &out); err != nil {
				t.Error(err)
			}
		}()
		if i == 63 {
			wg.Wait() // the last one is made last
		}
	}
	wg.Wait()
	tmp := filepath.Join(f.DataDir, server.TmpDir)
	m := startMeter(t, f)
	conn, answer := rawGitPost(t, f, "/alice/app.git/git-receive-pack", f.token, "application/x-git-receive-pack-request", -1)
	zero := strings.Repeat("0", 40)
	if err := writeChunk(conn, []byte(pkt(zero+" "+strings.Repeat("1", 40)+" refs/heads/stalled\x00report-status\n")+"0000PACK")); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, 5*time.Second, "the stalled push to be spooled", func() bool { return dirBytes(tmp) > 0 })

	timed := func(what string, args ...string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		start := time.Now()
		out, err := gitCtx(t, ctx, args...)
		took := time.Since(start)
		t.Logf("%s while a push stalls: %s", what, took.Round(time.Millisecond))
		if err != nil {
			t.Errorf("%s: %v\n%s", what, err, out)
		}
		if took > time.Second {
			t.Errorf("%s took %s while another push stalled, want under a second", what, took)
		}
	}
	other := servertest.WorkTree(t, map[string]string{"README": "bob\n"})
	timed("push to bob/r64", "-C", other, "push", "-q", f.GitURL("bob/r64", bob), "main")
	timed("push to alice/app", "-C", other, "push", "-q", f.GitURL(f.repo, f.token), "main")
	timed("fetch of alice/app", "clone", "-q", f.GitURL(f.repo, f.token), filepath.Join(t.TempDir(), "clone"))
	conn.Close()
	answer()
	waitEmpty(t, tmp)
	m.end("a stalled push", 1<<20)
}

// gitCtx runs git with args until ctx ends, with no configuration but
// the command line's and no prompts.
func gitCtx(t *testing.T, ctx context.Context, args ...string) (string, error) {
	t.Helper()
	cmd := exec.CommandContext(ctx, "git", args...)
	home := t.TempDir()
	cmd.Env = append(os.Environ(), "HOME="+home, "XDG_CONFIG_HOME="+home, "GIT_CONFIG_NOSYSTEM=1", "GIT_TERMINAL_PROMPT=0")
	cmd.WaitDelay = time.Second // git's helpers hold its output open
	out, err := cmd.CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

// TestServer_SpoolsLeftByACrashAreRemovedAtStart pins the last way out
// of a spool: a server killed mid-push leaves it, the next start removes
// it.
func TestServer_SpoolsLeftByACrashAreRemovedAtStart(t *testing.T) {
	t.Parallel()
	f := newFixture(t, servertest.Options{})
	tmp := filepath.Join(f.DataDir, server.TmpDir)
	if err := os.WriteFile(filepath.Join(tmp, "push-123"), make([]byte, 1<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	f.Restart()
	if ents, err := os.ReadDir(tmp); err != nil || len(ents) != 0 {
		t.Fatalf("DATA/tmp after a start: %v, %v; want empty", ents, err)
	}
}
