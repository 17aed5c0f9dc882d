package e2e

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/testwait"
)

// world is one knotless-server process with its own data directory, the
// admin's token, one repository (admin/app) and a local git work tree that
// pushes to it. Runners are added with registerRunner and startRunner.
type world struct {
	t     testing.TB
	root  string // t.TempDir() holding everything below
	data  string // server --data
	home  string // HOME of every process
	lease time.Duration
	// serverArgs are more knotless-server flags (e.g. --handover-grace).
	serverArgs []string
	server     *proc
	url        string // server URL, e.g. http://127.0.0.1:40123
	token      string // admin API token
	repo       string // "admin/app"
	src        string // local work tree
	// gate is a directory passed to every step as $GATE: steps wait for
	// files the test creates there, and create files the test waits for.
	gate string
	// tag (NAME=VALUE) is in every step's environment, so the cleanup
	// finds and kills whatever a step left running.
	tag string
	// env is more variables for every process (e.g. SSL_CERT_FILE for a
	// server behind a TLS front), and httpc the client of api() (nil:
	// the default).
	env   []string
	httpc *http.Client
}

// worldEnv is the environment of the world's processes: baseEnv and env.
func (w *world) worldEnv() []string { return append(baseEnv(w.home), w.env...) }

// newWorld starts a server with the given lease (and more server flags)
// and creates admin/app.
func newWorld(t testing.TB, lease time.Duration, serverArgs ...string) *world {
	t.Helper()
	return newWorldAt(t, "127.0.0.1:0", lease, serverArgs...)
}

// newWorldAt is newWorld with the server listening on listen (e.g. the
// address pods reach the host at, port 0).
func newWorldAt(t testing.TB, listen string, lease time.Duration, serverArgs ...string) *world {
	t.Helper()
	return newWorldWith(t, listen, lease, nil, nil, serverArgs...)
}

// newWorldWith is newWorldAt whose processes get env too and whose api()
// uses httpc (nil: the default client).
func newWorldWith(t testing.TB, listen string, lease time.Duration, env []string, httpc *http.Client, serverArgs ...string) *world {
	t.Helper()
	root := t.TempDir()
	w := &world{t: t, root: root, data: filepath.Join(root, "data"), home: filepath.Join(root, "home"),
		lease: lease, serverArgs: serverArgs, repo: "admin/app", src: filepath.Join(root, "src"), gate: filepath.Join(root, "gate"),
		tag: "KNOTLESS_E2E_TAG=" + randomHex(8), env: env, httpc: httpc}
	for _, d := range []string{w.home, w.src, w.gate} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// Registered first, so it runs last: after the runners are killed,
	// and its lines are the last of a failed test's output (what a CI
	// log's excerpt shows).
	var runsAtEnd string
	t.Cleanup(func() {
		if pids := killAgentsUnder(root); len(pids) > 0 {
			t.Logf("killed step agents runners left running: %v", pids)
		}
		if pids := killTagged(w.tag); len(pids) > 0 {
			t.Logf("killed processes steps left running: %v", pids)
		}
		if runsAtEnd != "" {
			t.Logf("──── runs of %s when the test failed ────\n%s", w.repo, runsAtEnd)
		}
	})
	w.startServer(listen)
	// Runs before the server is stopped (its cleanup came first).
	t.Cleanup(func() {
		if t.Failed() {
			runsAtEnd = w.runSummary()
		}
	})
	out := w.cliOK("", "repo", "create", "app")
	if !strings.Contains(out, w.url+"/admin/app.git") {
		t.Fatalf("repo create printed no clone URL %s/admin/app.git:\n%s", w.url, out)
	}
	w.git("init", "-q", "-b", "main")
	return w
}

// startServer starts knotless-server on listen and waits until it answers.
// A fixed port may be taken for a moment by an outgoing connection's local
// port while the server is down; then it tries again for a few seconds.
func (w *world) startServer(listen string) {
	w.t.Helper()
	urlFile := filepath.Join(w.data, "server.url")
	_ = os.Remove(urlFile) // a SIGKILLed server leaves it behind
	retryUntil := time.Now().Add(15 * time.Second)
	for {
		w.server = startProc(w.t, "knotless-server", w.worldEnv(), w.root, serverBin(),
			append([]string{"--data", w.data, "--listen", listen, "--lease", w.lease.String(),
				"--max-registrations-per-minute", "1000"}, w.serverArgs...)...)
		ok := false
		testwait.Until(w.t, 30*time.Second, "server.url and admin.token", func() (bool, string) {
			u, err1 := os.ReadFile(urlFile)
			tok, err2 := os.ReadFile(filepath.Join(w.data, "admin.token"))
			if err1 == nil && err2 == nil && len(bytes.TrimSpace(u)) > 0 && len(bytes.TrimSpace(tok)) > 0 {
				w.url, w.token = strings.TrimSpace(string(u)), strings.TrimSpace(string(tok))
				ok = true
				return true, ""
			}
			if w.server.exited() {
				return true, ""
			}
			return false, fmt.Sprintf("%v, %v", err1, err2)
		})
		if ok {
			break
		}
		out := w.server.output()
		if !strings.HasSuffix(listen, ":0") && strings.Contains(out, "address already in use") && time.Now().Before(retryUntil) {
			time.Sleep(200 * time.Millisecond) // the port's other user is a short-lived connection
			continue
		}
		w.t.Fatalf("knotless-server exited early:\n%s", out)
	}
	testwait.Until(w.t, 10*time.Second, "the server to answer", func() (bool, string) {
		var out api.DescribeServerOutput
		err := w.api().Query(context.Background(), api.MethodDescribeServer, nil, &out)
		return err == nil, fmt.Sprint(err)
	})
}

// stopServer sends SIGTERM and waits for a clean exit.
func (w *world) stopServer() {
	w.t.Helper()
	w.server.signal(w.t, syscall.SIGTERM)
	if code := w.server.wait(w.t, 30*time.Second); code != 0 {
		w.t.Fatalf("knotless-server exited %d after SIGTERM:\n%s", code, w.server.output())
	}
}

// restartServer starts the server again on the port it had, with the same
// data directory.
func (w *world) restartServer() {
	w.t.Helper()
	u, err := url.Parse(w.url)
	if err != nil {
		w.t.Fatal(err)
	}
	old := w.url
	w.startServer("127.0.0.1:" + u.Port())
	if w.url != old {
		w.t.Fatalf("restarted server answers at %s, want %s", w.url, old)
	}
}

// api returns an XRPC client with the admin's token.
func (w *world) api() *api.Client {
	return &api.Client{BaseURL: w.url, Auth: api.BearerToken(w.token), HTTP: w.httpc}
}

// cliResult is what one knotless CLI process did.
type cliResult struct {
	stdout, stderr string
	code           int
}

// cli runs the knotless CLI with KNOTLESS_SERVER and KNOTLESS_TOKEN set and
// stdin as its standard input.
func (w *world) cli(stdin string, args ...string) cliResult {
	w.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, cliBin(), args...)
	cmd.Dir = w.src
	cmd.Env = append(w.worldEnv(), "XDG_CONFIG_HOME="+filepath.Join(w.home, ".config"),
		"KNOTLESS_SERVER="+w.url, "KNOTLESS_TOKEN="+w.token)
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	res := cliResult{stdout: out.String(), stderr: errb.String()}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		res.code = ee.ExitCode()
	default:
		w.t.Fatalf("knotless %s: %v", strings.Join(args, " "), err)
	}
	return res
}

// cliOK runs the CLI and fails the test unless it exits 0; it returns stdout.
func (w *world) cliOK(stdin string, args ...string) string {
	w.t.Helper()
	res := w.cli(stdin, args...)
	if res.code != 0 {
		w.t.Fatalf("knotless %s: exit %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), res.code, res.stdout, res.stderr)
	}
	return res.stdout
}

// runnerID is one registered runner identity: its state file and the work
// directory its processes use.
type runnerID struct {
	name, state, work string
}

// registerRunner runs `knotless-run login` for admin/app and approves the
// runner with `knotless runner approve`.
func (w *world) registerRunner(name string) *runnerID {
	w.t.Helper()
	r := &runnerID{name: name, state: filepath.Join(w.root, name+".json"), work: filepath.Join(w.root, name+"-work")}
	// The owner makes a one-use registration token; login reads it from
	// the environment, as docs/runner.md says.
	token := strings.TrimSpace(w.cliOK("", "runner", "token", "--repo", w.repo))
	if !strings.HasPrefix(token, "knreg_") {
		w.t.Fatalf("knotless runner token printed %q, want a knreg_ token", token)
	}
	cmd := exec.Command(runnerBin(), "login", "--server", w.url, "--repo", w.repo, "--name", name, "--state", r.state)
	cmd.Env = append(w.worldEnv(), "KNOTLESS_REGISTRATION_TOKEN="+token)
	out, err := cmd.CombinedOutput()
	if err != nil {
		w.t.Fatalf("knotless-run login: %v\n%s", err, out)
	}
	// login prints the approve command with the runner's DID; approving
	// with it checks the owner approves this very registration.
	prefix := "knotless runner approve " + name + " --repo " + w.repo + " --did "
	i := strings.Index(string(out), prefix)
	if i < 0 {
		w.t.Fatalf("login does not print the approve command with --did:\n%s", out)
	}
	did := strings.Fields(string(out)[i+len(prefix):])[0]
	if !strings.HasPrefix(did, "did:key:") {
		w.t.Fatalf("approve command names DID %q, want a did:key", did)
	}
	w.cliOK("", "runner", "approve", name, "--repo", w.repo, "--did", did)
	return r
}

// startRunner starts `knotless-run run` for r with the shell executor; every
// step gets $GATE and the world's tag. extra are more flags.
func (w *world) startRunner(r *runnerID, extra ...string) *proc {
	w.t.Helper()
	return w.startRunnerBin(runnerBin(), r, extra...)
}

// startRunnerBin is startRunner with another knotless-run program.
func (w *world) startRunnerBin(bin string, r *runnerID, extra ...string) *proc {
	w.t.Helper()
	args := append([]string{"run", "--state", r.state, "--executor", "shell", "--work", r.work,
		"--env", "GATE=" + w.gate, "--env", w.tag}, extra...)
	return startProc(w.t, "knotless-run", w.worldEnv(), w.root, bin, args...)
}

// gitEnv is the environment of git commands: an author and committer for a
// machine without git configuration, and the admin token as an HTTP header
// given through GIT_CONFIG_* (never in a URL or an argument).
func (w *world) gitEnv() []string {
	auth := base64.StdEncoding.EncodeToString([]byte("admin:" + w.token))
	return append(w.worldEnv(),
		"GIT_AUTHOR_NAME=E2E", "GIT_AUTHOR_EMAIL=e2e@example.com",
		"GIT_COMMITTER_NAME=E2E", "GIT_COMMITTER_EMAIL=e2e@example.com",
		"GIT_CONFIG_COUNT=1", "GIT_CONFIG_KEY_0=http.extraHeader",
		"GIT_CONFIG_VALUE_0=Authorization: Basic "+auth)
}

func (w *world) git(args ...string) string {
	w.t.Helper()
	cmd := exec.Command("git", append([]string{"-C", w.src}, args...)...)
	cmd.Env = w.gitEnv()
	out, err := cmd.CombinedOutput()
	if err != nil {
		w.t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

// commit writes files (path → content; "" removes the file) into the work
// tree and commits them.
func (w *world) commit(files map[string]string) {
	w.t.Helper()
	for p, c := range files {
		full := filepath.Join(w.src, p)
		if c == "" {
			_ = os.Remove(full)
			continue
		}
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			w.t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(c), 0o644); err != nil {
			w.t.Fatal(err)
		}
	}
	w.git("add", "-A")
	w.git("commit", "-q", "--allow-empty", "-m", "e2e change")
}

// latestPipeline returns the id of the newest pipeline of the repository
// (0: none yet).
func (w *world) latestPipeline() int64 {
	w.t.Helper()
	var id int64
	for _, r := range w.runs(0) {
		id = max(id, r.Pipeline)
	}
	return id
}

// runs lists the repository's runs, of one pipeline when pipeline > 0.
func (w *world) runs(pipeline int64) []api.Run {
	w.t.Helper()
	runs, err := w.listRuns(context.Background(), pipeline)
	if err != nil {
		w.t.Fatalf("list runs: %v", err)
	}
	return runs
}

// listRuns is runs without failing the test.
func (w *world) listRuns(ctx context.Context, pipeline int64) ([]api.Run, error) {
	q := url.Values{"repo": {w.repo}}
	if pipeline > 0 {
		q.Set("pipeline", strconv.FormatInt(pipeline, 10))
	}
	var out api.ListRunsOutput
	err := w.api().Query(ctx, api.MethodListRuns, q, &out)
	return out.Runs, err
}

// push commits files, pushes main and returns the runs of the pipeline the
// push made, once it has want runs.
func (w *world) push(files map[string]string, want int) []api.Run {
	w.t.Helper()
	w.commit(files)
	before := w.latestPipeline()
	w.git("push", "-q", w.url+"/"+w.repo+".git", "HEAD:refs/heads/main")
	var runs []api.Run
	testwait.Until(w.t, 15*time.Second, "the push's pipeline", func() (bool, string) {
		p := w.latestPipeline()
		if p <= before {
			return false, "no new pipeline"
		}
		runs = w.runs(p)
		return len(runs) == want, fmt.Sprintf("%d runs in pipeline %d", len(runs), p)
	})
	return runs
}

// pushOne pushes a change that makes exactly one run and returns it.
func (w *world) pushOne(files map[string]string) api.Run {
	w.t.Helper()
	return w.push(files, 1)[0]
}

// run returns the run with its steps.
func (w *world) run(id int64) api.Run {
	w.t.Helper()
	var r api.Run
	if err := w.api().Query(context.Background(), api.MethodGetRun, url.Values{"run": {strconv.FormatInt(id, 10)}}, &r); err != nil {
		w.t.Fatalf("get run %d: %v", id, err)
	}
	return r
}

// waitRun polls run id until cond holds (d at most) and returns it.
func (w *world) waitRun(id int64, d time.Duration, what string, cond func(api.Run) bool) api.Run {
	w.t.Helper()
	var r api.Run
	testwait.Until(w.t, d, fmt.Sprintf("run %d: %s", id, what), func() (bool, string) {
		var err error
		r, err = w.tryRun(id)
		if err != nil {
			return false, err.Error()
		}
		return cond(r), fmt.Sprintf("%s/%s %q", r.State, r.Reason, r.Message)
	})
	return r
}

// tryRun is run without failing the test (the server may be restarting).
func (w *world) tryRun(id int64) (api.Run, error) {
	var r api.Run
	err := w.api().Query(context.Background(), api.MethodGetRun, url.Values{"run": {strconv.FormatInt(id, 10)}}, &r)
	return r, err
}

// waitFinal waits up to d for run id to reach a final state.
func (w *world) waitFinal(id int64, d time.Duration) api.Run {
	w.t.Helper()
	return w.waitRun(id, d, "a final state", func(r api.Run) bool { return api.IsFinal(r.State) })
}

// stepLog reads one step's whole log from the server.
func (w *world) stepLog(id int64, step int) string {
	w.t.Helper()
	resp, err := w.api().Do(context.Background(), http.MethodGet, api.MethodGetRunLog,
		url.Values{"run": {strconv.FormatInt(id, 10)}, "step": {strconv.Itoa(step)}}, "", nil)
	if err != nil {
		w.t.Fatalf("get log of run %d step %d: %v", id, step, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		w.t.Fatal(err)
	}
	return string(b)
}

// waitGate waits up to d for a step of run id to create GATE/name; the test
// fails at once if the run ends first.
func (w *world) waitGate(id int64, name string, d time.Duration) {
	w.t.Helper()
	testwait.Until(w.t, d, fmt.Sprintf("a step of run %d to create $GATE/%s", id, name), func() (bool, string) {
		if fileExists(filepath.Join(w.gate, name)) {
			return true, ""
		}
		r, err := w.tryRun(id)
		if err != nil {
			return false, err.Error()
		}
		if api.IsFinal(r.State) {
			w.t.Fatalf("%s before its step created $GATE/%s; setup log:\n%s", describe(r), name, w.stepLog(id, api.SetupStep))
		}
		return false, describe(r)
	})
}

// openGate creates GATE/name, which a step waits for.
func (w *world) openGate(name string) {
	w.t.Helper()
	if err := os.WriteFile(filepath.Join(w.gate, name), nil, 0o644); err != nil {
		w.t.Fatal(err)
	}
}

// describe formats a run for failure messages.
// runSummary is a line per run of the repository (describe), oldest
// first, or why there is none; it never fails the test.
func (w *world) runSummary() string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	runs, err := w.listRuns(ctx, 0)
	if err != nil {
		return fmt.Sprintf("(could not list them: %v)", err)
	}
	if len(runs) == 0 {
		return "(none)"
	}
	var b strings.Builder
	for i := len(runs) - 1; i >= 0; i-- {
		r := runs[i]
		fmt.Fprintf(&b, "%s (%s, %s)\n", describe(r), r.Workflow, r.Ref)
	}
	return b.String()
}

func describe(r api.Run) string {
	code := "-"
	if r.ExitCode != nil {
		code = strconv.Itoa(*r.ExitCode)
	}
	return fmt.Sprintf("run %d %s/%s exit %s %q", r.ID, r.State, r.Reason, code, r.Message)
}
