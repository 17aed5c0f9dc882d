package main

import (
	"context"
	"encoding/base64"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"knotless.dev/knotless/internal/api"
)

// world is the Knotless side: a knotless-server on a fresh data directory
// with repository admin/scale holding the workflow, and the runners.
type world struct {
	bin, dir, url, token string
	admin                *api.Client
	repo                 string
	runnerArgs           map[string][]string
	runners              map[string]*exec.Cmd
	server               *exec.Cmd
}

// scaleWorkflow is one run per matrix value, each one step that prints
// its clock: triggered (on: manual), for runners labelled scale.
func scaleWorkflow(matrix int) string {
	vals := make([]string, matrix)
	for i := range vals {
		vals[i] = fmt.Sprintf("%q", fmt.Sprint(i))
	}
	return "name: scale\non:\n  manual: {}\nrunners: [scale]\nmatrix:\n  i: [" + strings.Join(vals, ", ") + "]\nsteps:\n  - name: clock\n    run: date +%s%N\n"
}

// startWorld starts the server, makes the repository and pushes the
// workflow.
func startWorld(ctx context.Context, bin, dir string, matrix int) (*world, error) {
	w := &world{bin: bin, dir: dir, repo: "admin/scale", runnerArgs: map[string][]string{}, runners: map[string]*exec.Cmd{}}
	data := filepath.Join(dir, "server")
	var err error
	w.server, err = w.start("knotless-server", "server", "--data", data, "--listen", "127.0.0.1:0", "--lease", "30s",
		"--log-level", "warn", "--max-registrations-per-minute", "1000000")
	if err != nil {
		return w, err
	}
	if w.url, err = waitFile(ctx, filepath.Join(data, "server.url")); err != nil {
		return w, err
	}
	if w.token, err = waitFile(ctx, filepath.Join(data, "admin.token")); err != nil {
		return w, err
	}
	w.admin = &api.Client{BaseURL: w.url, Auth: api.BearerToken(w.token)}
	if err := w.admin.Procedure(ctx, api.MethodCreateRepo, api.CreateRepoInput{Repo: w.repo}, nil); err != nil {
		return w, fmt.Errorf("create repository %s: %w", w.repo, err)
	}
	git := filepath.Join(dir, "checkout")
	wf := filepath.Join(git, ".knotless", "workflows", "scale.yml")
	if err := os.MkdirAll(filepath.Dir(wf), 0o755); err != nil {
		return w, err
	}
	if err := os.WriteFile(wf, []byte(scaleWorkflow(matrix)), 0o644); err != nil {
		return w, err
	}
	auth := base64.StdEncoding.EncodeToString([]byte("admin:" + w.token))
	for _, args := range [][]string{{"init", "-q", "-b", "main"}, {"add", "."}, {"commit", "-q", "-m", "scale"},
		{"push", "-q", w.url + "/" + w.repo + ".git", "HEAD:refs/heads/main"}} {
		cmd := exec.CommandContext(ctx, "git", args...)
		cmd.Dir = git
		cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null", "GIT_TERMINAL_PROMPT=0",
			"GIT_AUTHOR_NAME=bench", "GIT_AUTHOR_EMAIL=bench@example.invalid", "GIT_COMMITTER_NAME=bench",
			"GIT_COMMITTER_EMAIL=bench@example.invalid", "GIT_CONFIG_COUNT=1", "GIT_CONFIG_KEY_0=http.extraHeader",
			"GIT_CONFIG_VALUE_0=Authorization: Basic "+auth)
		if out, err := cmd.CombinedOutput(); err != nil {
			return w, fmt.Errorf("git %s: %w\n%s", args[0], err, out)
		}
	}
	return w, nil
}

// start runs program from bin with its output in DIR/NAME.log, in its own
// process group. logName names the log.
func (w *world) start(program, logName string, args ...string) (*exec.Cmd, error) {
	f, err := os.OpenFile(filepath.Join(w.dir, logName+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	cmd := exec.Command(filepath.Join(w.bin, program), args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", program, err)
	}
	go func() { _ = cmd.Wait() }()
	return cmd, nil
}

// addRunner registers and approves runner name (label scale) and starts it
// with the kube executor against kubeconfig, in namespace ns.
func (w *world) addRunner(ctx context.Context, name, kubeconfig, ns string, capacity int) error {
	state := filepath.Join(w.dir, name+".json")
	login := exec.CommandContext(ctx, filepath.Join(w.bin, "knotless-run"), "login", "--server", w.url,
		"--repo", w.repo, "--name", name, "--labels", "scale", "--state", state)
	login.Env = append(os.Environ(), "KNOTLESS_REGISTRATION_TOKEN="+w.token)
	if out, err := login.CombinedOutput(); err != nil {
		return fmt.Errorf("knotless-run login: %w\n%s", err, out)
	}
	if err := w.admin.Procedure(ctx, api.MethodApproveRunner, api.RunnerRef{Repo: w.repo, Name: name}, nil); err != nil {
		return fmt.Errorf("approve runner %s: %w", name, err)
	}
	w.runnerArgs[name] = []string{"run", "--state", state, "--work", filepath.Join(w.dir, name+"-work"),
		"--executor", "kube", "--kubeconfig", kubeconfig, "--namespace", ns, "--image", "kwok.invalid/job:fake",
		"--cpus", "100m", "--memory", "64Mi", "--disk", "256Mi", "--user-namespace", "off",
		"--capacity", fmt.Sprint(capacity), "--stop-wait", "2s", "--log-level", "warn"}
	return w.startRunner(name)
}

// startRunner starts (or restarts) runner name with its arguments.
func (w *world) startRunner(name string) error {
	cmd, err := w.start("knotless-run", name, w.runnerArgs[name]...)
	if err != nil {
		return err
	}
	w.runners[name] = cmd
	return nil
}

// killRunner SIGKILLs runner name's process group.
func (w *world) killRunner(name string) {
	if c := w.runners[name]; c != nil {
		_ = syscall.Kill(-c.Process.Pid, syscall.SIGKILL)
	}
}

// trigger starts one pipeline of the workflow and returns its runs.
func (w *world) trigger(ctx context.Context) ([]api.Run, error) {
	var p api.Pipeline
	if err := w.admin.Procedure(ctx, api.MethodTriggerRun, api.TriggerInput{Repo: w.repo, Ref: "main"}, &p); err != nil {
		return nil, fmt.Errorf("trigger: %w", err)
	}
	return p.Runs, nil
}

// pipelineRuns returns the runs of pipeline id (at most limit).
func (w *world) pipelineRuns(ctx context.Context, id int64, limit int) ([]api.Run, error) {
	var out api.ListRunsOutput
	err := w.admin.Query(ctx, api.MethodListRuns, url.Values{"repo": {w.repo}, "pipeline": {fmt.Sprint(id)}, "limit": {fmt.Sprint(limit)}}, &out)
	return out.Runs, err
}

// close stops the runners and the server (SIGTERM to each process group,
// SIGKILL after 5 s).
func (w *world) close() {
	for _, c := range w.runners {
		stop(c)
	}
	if w.server != nil {
		stop(w.server)
	}
}

func stop(c *exec.Cmd) {
	_ = syscall.Kill(-c.Process.Pid, syscall.SIGTERM)
	for i := 0; i < 50 && syscall.Kill(c.Process.Pid, 0) == nil; i++ {
		time.Sleep(100 * time.Millisecond)
	}
	_ = syscall.Kill(-c.Process.Pid, syscall.SIGKILL)
}

// waitFile waits up to 30 s until path exists and is not empty, and
// returns its trimmed contents.
func waitFile(ctx context.Context, path string) (string, error) {
	deadline := time.Now().Add(30 * time.Second)
	for {
		b, err := os.ReadFile(path)
		if err == nil && len(strings.TrimSpace(string(b))) > 0 {
			return strings.TrimSpace(string(b)), nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return "", fmt.Errorf("waiting for %s: %v", path, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
