package e2e

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"knotless.dev/knotless/internal/store/postgres/pgtest"
	"knotless.dev/knotless/internal/testwait"
	"knotless.dev/knotless/test/scale"
)

// replicas are knotless-server processes on one PostgreSQL database
// (pgtest) and one data directory, behind one load balancer (scale.Proxy,
// in the test's process) whose URL is every replica's --url and the
// world's: the CLI, git and the runners reach whichever replica is up, as
// docs/scaling.md sets them up. Replica i listens on addrs[i] across its
// restarts.
type replicas struct {
	w     *world
	args  []string // every replica's flags but --listen
	addrs []string // each replica's listen address, 127.0.0.1:PORT
	procs []*proc  // each replica's latest process
	// summarized is set once a failed test's runs were logged.
	summarized bool
}

// newReplicaWorld starts n replicas with the given lease and more server
// flags, each ready (/readyz) before the next starts (the first makes the
// schema and the admin's token), and creates admin/app through the load
// balancer. The world's server is replica 0's first process; use the
// replicas' start and kill, not the world's startServer (replicas on
// PostgreSQL write no DATA/server.url).
func newReplicaWorld(t *testing.T, n int, lease time.Duration, serverArgs ...string) (*world, *replicas) {
	t.Helper()
	pg := pgtest.Start(t) // registered first: stopped after every replica is killed
	db := pg.Database(t)
	root := t.TempDir()
	w := &world{t: t, root: root, data: filepath.Join(root, "data"), home: filepath.Join(root, "home"),
		lease: lease, serverArgs: serverArgs, repo: "admin/app", src: filepath.Join(root, "src"), gate: filepath.Join(root, "gate"),
		tag: "KNOTLESS_E2E_TAG=" + randomHex(8)}
	for _, d := range []string{w.home, w.src, w.gate} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { // runs after the runners' and replicas' cleanups
		if pids := killAgentsUnder(root); len(pids) > 0 {
			t.Logf("killed step agents runners left running: %v", pids)
		}
		if pids := killTagged(w.tag); len(pids) > 0 {
			t.Logf("killed processes steps left running: %v", pids)
		}
	})
	rs := &replicas{w: w, procs: make([]*proc, n)}
	var backends []string
	for range n {
		port, err := pgtest.FreePort()
		if err != nil {
			t.Fatal(err)
		}
		rs.addrs = append(rs.addrs, fmt.Sprintf("127.0.0.1:%d", port))
		backends = append(backends, fmt.Sprintf("http://127.0.0.1:%d", port))
	}
	proxy, err := scale.NewProxy(backends)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	lb := &http.Server{Handler: proxy, ReadHeaderTimeout: 10 * time.Second}
	go lb.Serve(ln) //nolint:errcheck // ends with ErrServerClosed at cleanup
	t.Cleanup(func() { _ = lb.Close() })
	w.url = "http://" + ln.Addr().String()
	rs.args = append([]string{"--data", w.data, "--database", db, "--url", w.url, "--lease", lease.String(),
		"--max-registrations-per-minute", "1000"}, serverArgs...)
	for i := range n {
		rs.start(i)
	}
	w.server = rs.procs[0]
	tok, err := os.ReadFile(filepath.Join(w.data, "admin.token"))
	if err != nil {
		t.Fatal(err)
	}
	w.token = strings.TrimSpace(string(tok))
	if out := w.cliOK("", "repo", "create", "app"); !strings.Contains(out, w.url+"/admin/app.git") {
		t.Fatalf("repo create printed no clone URL %s/admin/app.git:\n%s", w.url, out)
	}
	w.git("init", "-q", "-b", "main")
	return w, rs
}

// name is replica i's name in logs and messages: "replica A", "replica B".
func (rs *replicas) name(i int) string { return fmt.Sprintf("replica %c", 'A'+i) }

// start starts replica i (again) on its address and waits until its
// /readyz answers 200. A port taken for a moment by an outgoing
// connection's local port while the replica was down is tried again for
// a few seconds.
func (rs *replicas) start(i int) {
	t := rs.w.t
	t.Helper()
	retryUntil := time.Now().Add(15 * time.Second)
	for {
		p := startProc(t, "knotless-server "+rs.name(i), rs.w.worldEnv(), rs.w.root, serverBin(),
			append([]string{"--listen", rs.addrs[i]}, rs.args...)...)
		rs.procs[i] = p
		// Runs before this process is killed, and before every process
		// started earlier: the latest replica started answers.
		t.Cleanup(rs.summarize)
		ready := false
		testwait.Until(t, 60*time.Second, rs.name(i)+" to answer /readyz", func() (bool, string) {
			if p.exited() {
				return true, ""
			}
			resp, err := http.Get("http://" + rs.addrs[i] + "/readyz")
			if err != nil {
				return false, err.Error()
			}
			resp.Body.Close()
			ready = resp.StatusCode == http.StatusOK
			return ready, resp.Status
		})
		if ready {
			return
		}
		out := p.output()
		if strings.Contains(out, "address already in use") && time.Now().Before(retryUntil) {
			time.Sleep(200 * time.Millisecond) // the port's other user is a short-lived connection
			continue
		}
		t.Fatalf("%s exited early:\n%s", rs.name(i), out)
	}
}

// summarize logs a line per run of the repository once, when the test
// failed (the first cleanup of a replica's start that runs).
func (rs *replicas) summarize() {
	if !rs.w.t.Failed() || rs.summarized {
		return
	}
	rs.summarized = true
	rs.w.t.Logf("──── runs of %s when the test failed ────\n%s", rs.w.repo, rs.w.runSummary())
}

// kill ends replica i with SIGKILL (no shutdown: its connections and
// transactions just end) and waits until it is gone.
func (rs *replicas) kill(i int) {
	t := rs.w.t
	t.Helper()
	p := rs.procs[i]
	p.kill()
	if !p.exited() {
		t.Fatalf("%s (pid %d) outlived SIGKILL", rs.name(i), p.pid())
	}
}

// cliOK runs the knotless CLI against replica i directly (not through the
// load balancer) and fails the test unless it exits 0; it returns stdout.
func (rs *replicas) cliOK(i int, args ...string) string {
	rs.w.t.Helper()
	lb := rs.w.url
	rs.w.url = "http://" + rs.addrs[i]
	defer func() { rs.w.url = lb }()
	return rs.w.cliOK("", args...)
}
