package main

import (
	"bufio"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"knotless.dev/knotless/internal/api"
)

// cluster is one benchmark's world: a knotless-server process on a fresh
// data directory, optionally knotless-run processes, and a local git
// checkout that pushes to the server. Close stops every process it started,
// the step agents the runners started included, and removes the directory.
type cluster struct {
	bin   string // directory holding the built programs
	dir   string // temporary directory holding everything below
	url   string // the server's base URL
	token string // the admin's API token
	admin *api.Client
	repo  string // "admin/bench"
	git   string // the local checkout

	server  *proc
	procs   []*proc             // every process started, in order
	runners map[string][]string // knotless-run's arguments, by runner name
}

// proc is a started program; done is closed once it has exited.
type proc struct {
	name string
	cmd  *exec.Cmd
	log  string // its stdout and stderr
	done chan struct{}
}

// startCluster starts a server with a repository admin/bench and a local
// checkout holding workflow (the YAML of .knotless/workflows/bench.yml),
// committed but not pushed.
func startCluster(ctx context.Context, bin, workflow string) (c *cluster, err error) {
	c, err = newCluster(bin)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			c.Close()
			c = nil
		}
	}()
	data := filepath.Join(c.dir, "server")
	c.server, err = c.start("knotless-server",
		"--data", data, "--listen", "127.0.0.1:0", "--lease", "30s", "--log-level", "warn",
		"--max-registrations-per-minute", "1000000") // the benchmarks register many runners from one address
	if err != nil {
		return c, err
	}
	if err := c.waitFile(ctx, filepath.Join(data, "server.url"), &c.url); err != nil {
		return c, err
	}
	if err := c.waitFile(ctx, filepath.Join(data, "admin.token"), &c.token); err != nil {
		return c, err
	}
	return c, c.setUp(ctx, workflow)
}

// newCluster makes a cluster's temporary directory; nothing runs yet.
func newCluster(bin string) (*cluster, error) {
	dir, err := os.MkdirTemp("", "knotless-bench.")
	if err != nil {
		return nil, fmt.Errorf("make temporary directory: %w", err)
	}
	return &cluster{bin: bin, dir: dir, repo: "admin/bench", git: filepath.Join(dir, "checkout"), runners: map[string][]string{}}, nil
}

// setUp makes the admin's client on c.url and c.token (the server must
// answer), the repository admin/bench and, unless workflow is empty, the
// local checkout holding it, committed but not pushed.
func (c *cluster) setUp(ctx context.Context, workflow string) error {
	c.admin = &api.Client{BaseURL: c.url, Auth: api.BearerToken(c.token)}
	if err := c.admin.Procedure(ctx, api.MethodCreateRepo, api.CreateRepoInput{Repo: c.repo}, nil); err != nil {
		return fmt.Errorf("create repository %s: %w", c.repo, err)
	}
	if workflow == "" {
		return nil
	}
	wf := filepath.Join(c.git, ".knotless", "workflows", "bench.yml")
	if err := os.MkdirAll(filepath.Dir(wf), 0o755); err != nil {
		return fmt.Errorf("make checkout: %w", err)
	}
	if err := os.WriteFile(wf, []byte(workflow), 0o644); err != nil {
		return fmt.Errorf("write workflow: %w", err)
	}
	for _, args := range [][]string{{"init", "-q", "-b", "main"}, {"add", "."}, {"commit", "-q", "-m", "bench workflow"}} {
		if _, err := c.gitCmd(ctx, args...); err != nil {
			return err
		}
	}
	return nil
}

// start runs program from the bin directory with its output in DIR/NAME.log.
// The process gets its own process group (a Ctrl-C reaches only this
// program, which stops the others in order) and dies with this program.
func (c *cluster) start(program string, args ...string) (*proc, error) {
	logPath := filepath.Join(c.dir, fmt.Sprintf("%s-%d.log", program, len(c.procs)))
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("create %s: %w", logPath, err)
	}
	defer logFile.Close()
	cmd := exec.Command(filepath.Join(c.bin, program), args...)
	cmd.Env = os.Environ()
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = clusterProcAttr()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", program, err)
	}
	p := &proc{name: program, cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		close(p.done)
	}()
	c.procs = append(c.procs, p)
	return p, nil
}

// startRunner registers a runner with label "bench", approves it and starts
// `knotless-run run` with the extra flags.
func (c *cluster) startRunner(ctx context.Context, name string, flags ...string) error {
	state := filepath.Join(c.dir, name+".json")
	login := exec.CommandContext(ctx, filepath.Join(c.bin, "knotless-run"), "login", "--server", c.url,
		"--repo", c.repo, "--name", name, "--labels", "bench", "--state", state)
	// The admin's API token is a registration credential too (api.RegistrationTokenHeader).
	login.Env = append(os.Environ(), "KNOTLESS_REGISTRATION_TOKEN="+c.token)
	if out, err := login.CombinedOutput(); err != nil {
		return fmt.Errorf("knotless-run login: %w\n%s", err, out)
	}
	if err := c.admin.Procedure(ctx, api.MethodApproveRunner, api.RunnerRef{Repo: c.repo, Name: name}, nil); err != nil {
		return fmt.Errorf("approve runner %s: %w", name, err)
	}
	args := append([]string{"run", "--state", state, "--executor", "shell",
		"--work", c.work(name), "--capacity", "1", "--stop-wait", "2s"}, flags...)
	c.runners[name] = args
	_, err := c.start("knotless-run", args...)
	return err
}

// work is the work directory of runner name.
func (c *cluster) work(name string) string { return filepath.Join(c.dir, name+"-work") }

// runner returns the newest knotless-run process of runner name.
func (c *cluster) runner(name string) *proc {
	for i := len(c.procs) - 1; i >= 0; i-- {
		p := c.procs[i]
		if p.name == "knotless-run" && len(p.cmd.Args) > 3 && p.cmd.Args[3] == filepath.Join(c.dir, name+".json") {
			return p
		}
	}
	return nil
}

// restartRunner starts runner name again with the arguments it had, on
// the same state file and work directory; the earlier process must have
// exited. It returns the new process and the moment just before it started.
func (c *cluster) restartRunner(name string) (*proc, time.Time, error) {
	args, ok := c.runners[name]
	if !ok {
		return nil, time.Time{}, fmt.Errorf("no runner %s was started", name)
	}
	t0 := time.Now()
	p, err := c.start("knotless-run", args...)
	return p, t0, err
}

// waitRunnerPolling waits until the runner has been heard from, i.e. its
// first long poll passed authentication.
func (c *cluster) waitRunnerPolling(ctx context.Context, name string) error {
	return poll(ctx, 60*time.Second, "runner "+name+" to poll", func() (bool, error) {
		var list api.ListRunnersOutput
		if err := c.admin.Query(ctx, api.MethodListRunners, url.Values{"repo": {c.repo}}, &list); err != nil {
			return false, err
		}
		for _, r := range list.Runners {
			if r.Name == name && r.LastSeenAt != nil {
				return true, nil
			}
		}
		return false, nil
	})
}

// gitCmd runs git in the checkout with a private configuration; the admin
// token travels as an http.extraHeader through GIT_CONFIG_* variables,
// never in argv.
func (c *cluster) gitCmd(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "git", args...)
	cmd.Dir = c.git
	auth := base64.StdEncoding.EncodeToString([]byte("admin:" + c.token))
	cmd.Env = append(os.Environ(),
		"GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null", "GIT_TERMINAL_PROMPT=0",
		"GIT_AUTHOR_NAME=bench", "GIT_AUTHOR_EMAIL=bench@example.invalid",
		"GIT_COMMITTER_NAME=bench", "GIT_COMMITTER_EMAIL=bench@example.invalid",
		"GIT_CONFIG_COUNT=1", "GIT_CONFIG_KEY_0=http.extraHeader",
		"GIT_CONFIG_VALUE_0=Authorization: Basic "+auth)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("git %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out)), nil
}

// commit makes a new commit changing one file and returns its SHA.
func (c *cluster) commit(ctx context.Context, i int) (string, error) {
	return c.commitWorkflow(ctx, i, "")
}

// commitWorkflow makes a new commit changing one file and, unless workflow
// is empty, replacing the workflow with it; it returns the commit's SHA.
func (c *cluster) commitWorkflow(ctx context.Context, i int, workflow string) (string, error) {
	if err := os.WriteFile(filepath.Join(c.git, "iteration"), []byte(fmt.Sprintln(i)), 0o644); err != nil {
		return "", fmt.Errorf("write iteration file: %w", err)
	}
	if workflow != "" {
		if err := os.WriteFile(filepath.Join(c.git, ".knotless", "workflows", "bench.yml"), []byte(workflow), 0o644); err != nil {
			return "", fmt.Errorf("write workflow: %w", err)
		}
	}
	if _, err := c.gitCmd(ctx, "add", "-A"); err != nil {
		return "", err
	}
	if _, err := c.gitCmd(ctx, "commit", "-q", "-m", fmt.Sprint("iteration ", i)); err != nil {
		return "", err
	}
	return c.gitCmd(ctx, "rev-parse", "HEAD")
}

// push pushes HEAD to main on the server.
func (c *cluster) push(ctx context.Context) error {
	_, err := c.gitCmd(ctx, "push", "-q", c.url+"/"+c.repo+".git", "HEAD:refs/heads/main")
	return err
}

// observeEvery is how often waitRunFinished asks the server: no figure
// depends on when it notices (they come from the server's timestamps and
// the steps' own clocks), and asking more often would only load the
// machine the figures are taken on.
const observeEvery = 50 * time.Millisecond

// waitRunFinished finds the run of commit sha and waits until it is final.
func (c *cluster) waitRunFinished(ctx context.Context, sha string, timeout time.Duration) (api.Run, error) {
	var run api.Run
	err := pollEvery(ctx, observeEvery, timeout, "the run of "+sha[:8]+" to finish", func() (bool, error) {
		if run.ID == 0 {
			var list api.ListRunsOutput
			if err := c.admin.Query(ctx, api.MethodListRuns, url.Values{"repo": {c.repo}, "limit": {"5"}}, &list); err != nil {
				return false, err
			}
			for _, r := range list.Runs {
				if r.SHA == sha {
					run = r
				}
			}
			if run.ID == 0 {
				return false, nil
			}
		}
		if err := c.admin.Query(ctx, api.MethodGetRun, url.Values{"run": {fmt.Sprint(run.ID)}}, &run); err != nil {
			return false, err
		}
		return api.IsFinal(run.State), nil
	})
	return run, err
}

// firstLogLine returns the first line of a step's log, reading no further.
func (c *cluster) firstLogLine(ctx context.Context, run int64, step int) (string, error) {
	resp, err := c.admin.Do(ctx, http.MethodGet, api.MethodGetRunLog,
		url.Values{"run": {fmt.Sprint(run)}, "step": {fmt.Sprint(step)}}, "", nil)
	if err != nil {
		return "", fmt.Errorf("read log of run %d step %d: %w", run, step, err)
	}
	defer resp.Body.Close()
	line, err := bufio.NewReaderSize(resp.Body, 256).ReadString('\n')
	if err != nil && line == "" {
		return "", fmt.Errorf("read log of run %d step %d: %w", run, step, err)
	}
	return strings.TrimSpace(line), nil
}

// logTails returns the last lines of every process's log, for an error
// message.
func (c *cluster) logTails() string {
	var b strings.Builder
	for _, p := range c.procs {
		data, _ := os.ReadFile(p.log)
		lines := strings.Split(strings.TrimSpace(string(data)), "\n")
		fmt.Fprintf(&b, "--- %s (last lines of %s)\n%s\n", p.name, p.log,
			strings.Join(lines[max(0, len(lines)-15):], "\n"))
	}
	return b.String()
}

// Close stops every process, the last started first (SIGTERM to its
// process group, SIGKILL after 5 s), then the step agents the runners left
// (stopAgents), and removes the directory unless KNOTLESS_BENCH_KEEP is set.
func (c *cluster) Close() {
	for i := len(c.procs) - 1; i >= 0; i-- {
		p := c.procs[i]
		select {
		case <-p.done:
			continue // its process group may be another's by now
		default:
		}
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(5 * time.Second):
			_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
			<-p.done
		}
	}
	c.procs = nil
	// A runner stopped with SIGTERM hands its runs over: their agents stay.
	if n := stopAgents(c.dir, 5*time.Second); n > 0 {
		progress("stopped %d step agent(s) the runners left running", n)
	}
	if os.Getenv("KNOTLESS_BENCH_KEEP") != "" {
		fmt.Fprintf(os.Stderr, "bench files kept in %s\n", c.dir)
		return
	}
	_ = os.RemoveAll(c.dir)
}

// waitFile waits until path exists and is not empty, and stores its trimmed
// contents in dst.
func (c *cluster) waitFile(ctx context.Context, path string, dst *string) error {
	return poll(ctx, 30*time.Second, path, func() (bool, error) {
		select {
		case <-c.server.done:
			return true, errors.New("knotless-server exited; its log: " + c.server.log)
		default:
		}
		b, err := os.ReadFile(path)
		if err != nil || len(strings.TrimSpace(string(b))) == 0 {
			return false, nil
		}
		*dst = strings.TrimSpace(string(b))
		return true, nil
	})
}

// poll calls cond every 10 ms until it reports done, or timeout or ctx
// ends. An error with done false is transient (reported only on timeout);
// with done true it ends the wait at once.
func poll(ctx context.Context, timeout time.Duration, what string, cond func() (done bool, err error)) error {
	return pollEvery(ctx, 10*time.Millisecond, timeout, what, cond)
}

// pollEvery is poll calling cond every interval.
func pollEvery(ctx context.Context, interval, timeout time.Duration, what string, cond func() (done bool, err error)) error {
	deadline := time.Now().Add(timeout)
	for {
		ok, err := cond()
		if ok {
			return err
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if time.Now().After(deadline) {
			if err != nil {
				return fmt.Errorf("timed out waiting for %s: %w", what, err)
			}
			return fmt.Errorf("timed out waiting for %s", what)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(interval):
		}
	}
}
