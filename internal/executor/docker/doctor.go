package docker

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"time"

	"knotless.dev/knotless/internal/executor"
)

var _ executor.Doctor = (*Executor)(nil)

// Doctor checks, in order, for `knotless-run doctor --executor docker`:
// the engine answers (its version and API version); the runtime
// (--runtime, else the engine's default) is one the engine has; the data
// disk has --disk-floor free; the job network (the runner's own is made
// if missing, with its rules); and, when machine is set, a test container of that image runs a step
// that receives a test secret over the agent's stream, byte for byte, and
// is removed again, and, with --builder-image, a builds run's step reaches
// its builder's BuildKit (doctorBuilder). Each check is reported as it ends; the method
// returns early only when ctx ends.
func (e *Executor) Doctor(ctx context.Context, machine bool, report func(executor.Check)) {
	v, err := e.api.ServerVersion(ctx)
	if err != nil {
		report(executor.Check{Name: "engine reachable", Detail: err.Error(),
			Fix: "start the Docker engine, or point DOCKER_HOST at it (the runner's user needs access to its socket)"})
		return
	}
	report(executor.Check{Name: "engine reachable", OK: true,
		Detail: fmt.Sprintf("%s: Docker %s, API %s (client %s)", e.api.DaemonHost(), v.Version, v.APIVersion, e.api.ClientVersion())})
	if ctx.Err() != nil {
		return
	}

	info, err := e.api.Info(ctx)
	switch {
	case err != nil:
		report(executor.Check{Name: "runtime", Detail: err.Error(), Fix: "check the engine's health"})
	default:
		want := e.cfg.Runtime
		if want == "" {
			want = info.DefaultRuntime
		}
		var have []string
		for name := range info.Runtimes {
			have = append(have, name)
		}
		slices.Sort(have)
		if _, ok := info.Runtimes[want]; ok {
			report(executor.Check{Name: "runtime", OK: true, Detail: fmt.Sprintf("%s (engine has: %s)", want, strings.Join(have, ", "))})
		} else {
			report(executor.Check{Name: "runtime", Detail: fmt.Sprintf("%s is not a runtime of the engine (it has: %s)", want, strings.Join(have, ", ")),
				Fix: "install it and add it to the engine's daemon.json \"runtimes\", or give --runtime one of those"})
		}
	}
	if ctx.Err() != nil {
		return
	}

	if e.cfg.DiskFloor > 0 {
		free, where, err := e.cfg.FreeSpace(ctx)
		switch {
		case err != nil:
			report(executor.Check{Name: "disk floor", Detail: err.Error(), Fix: "run the runner on the engine's host, or drop --disk-floor"})
		case free < uint64(e.cfg.DiskFloor):
			report(executor.Check{Name: "disk floor", Detail: fmt.Sprintf("%s has %s free, less than --disk-floor %s: runs wait", where, size(free), size(uint64(e.cfg.DiskFloor))),
				Fix: "free space on the engine's data disk (docker system prune), or lower --disk-floor"})
		default:
			report(executor.Check{Name: "disk floor", OK: true, Detail: fmt.Sprintf("%s has %s free (--disk-floor %s)", where, size(free), size(uint64(e.cfg.DiskFloor)))})
		}
	} else {
		report(executor.Check{Name: "disk floor", OK: true, Detail: "none (--disk-floor 0)"})
	}
	if ctx.Err() != nil {
		return
	}
	report(e.doctorNetwork(ctx))
	if ctx.Err() != nil || !machine {
		return
	}
	report(e.doctorRun(ctx))
	if ctx.Err() != nil || e.cfg.BuilderImage == "" {
		return
	}
	report(e.doctorBuilder(ctx))
}

// doctorWorkspace makes a temporary checkout the job's user can enter
// (Doctor's executor is ephemeral, so Prepare never hands the workspace
// to the job's user), and the func that removes it.
func (e *Executor) doctorWorkspace() (string, func(), error) {
	ws, err := tempDir()
	if err != nil {
		return "", nil, err
	}
	if err := os.Chmod(ws, 0o755); err != nil {
		removeAll(ws)
		return "", nil, err
	}
	if r := e.cfg.RunAs; !r.Image && os.Geteuid() == 0 {
		_ = os.Chown(ws, int(r.UID), int(r.GID))
	}
	return ws, func() { removeAll(ws) }, nil
}

// doctorBuilder starts a builds run (--builder-image) and runs a step
// whose buildctl, from its PATH, asks the builder's BuildKit for its
// workers; everything is removed again.
func (e *Executor) doctorBuilder(ctx context.Context) executor.Check {
	name := "builder runs BuildKit"
	if e.cfg.Image == "" {
		return executor.Check{Name: name, Detail: "no --image to start a test container from", Fix: "give --image, or --skip-machine"}
	}
	ws, done, err := e.doctorWorkspace()
	if err != nil {
		return executor.Check{Name: name, Detail: err.Error()}
	}
	defer done()
	t0 := time.Now()
	var setup bytes.Buffer
	id := fmt.Sprintf("doctor-build-%d", time.Now().UnixNano()%1e9)
	s, err := e.Prepare(ctx, executor.Spec{ID: id, Image: e.cfg.Image, Workspace: ws, Timeout: 2 * time.Minute, Log: &setup, ContainerBuilds: true})
	if err != nil {
		return executor.Check{Name: name, Detail: err.Error(), Fix: "see the message; the builder image is made as docs/container-builds.md says"}
	}
	defer s.Cleanup(context.WithoutCancel(ctx))
	var out bytes.Buffer
	res, err := s.Exec(ctx, executor.Step{ID: "1", Name: "doctor", Script: "buildctl debug workers\n"}, &out)
	if err != nil {
		return executor.Check{Name: name, Detail: err.Error()}
	}
	if res.ExitCode != 0 {
		return executor.Check{Name: name, Detail: fmt.Sprintf("buildctl debug workers ended %d %s: %s", res.ExitCode, res.Reason, strings.TrimSpace(out.String())),
			Fix: "the builder's log (docker logs) says why"}
	}
	if err := s.Cleanup(ctx); err != nil {
		return executor.Check{Name: name, Detail: "removing the builder: " + err.Error()}
	}
	return executor.Check{Name: name, OK: true, Detail: fmt.Sprintf("image %s: a step's buildctl reached BuildKit; started, run and removed in %s", e.cfg.BuilderImage, time.Since(t0).Round(time.Millisecond))}
}

// doctorNetwork checks the job network: --network as given, or the
// runner's own (made if missing) with its iptables rules in place.
func (e *Executor) doctorNetwork(ctx context.Context) executor.Check {
	name := "job network"
	if e.cfg.Network != "" {
		return executor.Check{Name: name, OK: true, Detail: fmt.Sprintf("--network %s (its isolation is the operator's)", e.cfg.Network)}
	}
	netName, err := e.network(ctx)
	if err != nil {
		return executor.Check{Name: name, Detail: err.Error(), Fix: "check the engine's networking, or give --network"}
	}
	for _, rule := range HostRules(e.cfg.Runner) {
		if out, err := exec.CommandContext(ctx, "iptables", append([]string{"-w", "-C"}, rule...)...).CombinedOutput(); err != nil {
			return executor.Check{Name: name, Detail: fmt.Sprintf("%s: the rule %q is missing (%v %s): job containers can reach this host or link-local addresses", netName, strings.Join(rule, " "), err, strings.TrimSpace(string(out))),
				Fix: "run the runner as root with iptables installed, or give --network a network of your own"}
		}
	}
	return executor.Check{Name: name, OK: true, Detail: fmt.Sprintf("%s: no inter-container communication; this host and link-local addresses unreachable", netName)}
}

// doctorRun starts a test container of the default image and runs a
// step with a test secret in it.
func (e *Executor) doctorRun(ctx context.Context) executor.Check {
	name := "test container with a secret"
	if e.cfg.Image == "" {
		return executor.Check{Name: name, Detail: "no --image to start a test container from", Fix: "give --image, or --skip-machine"}
	}
	ws, done, err := e.doctorWorkspace()
	if err != nil {
		return executor.Check{Name: name, Detail: err.Error()}
	}
	defer done()
	t0 := time.Now()
	var setup bytes.Buffer
	id := fmt.Sprintf("doctor-%d", time.Now().UnixNano()%1e9)
	s, err := e.Prepare(ctx, executor.Spec{ID: id, Image: e.cfg.Image, Workspace: ws, Timeout: 2 * time.Minute, Log: &setup})
	if err != nil {
		return executor.Check{Name: name, Detail: err.Error(), Fix: "see the message; `docker run` the image by hand with the same user to compare"}
	}
	defer s.Cleanup(context.WithoutCancel(ctx))
	secret := fmt.Sprintf("knotless-doctor-%d", time.Now().UnixNano())
	var out bytes.Buffer
	res, err := s.Exec(ctx, executor.Step{ID: "1", Name: "doctor", Script: "printf '%s' \"$DOCTOR_SECRET\" | wc -c\n",
		Secrets: map[string]string{"DOCTOR_SECRET": secret}}, &out)
	if err != nil {
		return executor.Check{Name: name, Detail: err.Error()}
	}
	got := strings.TrimSpace(out.String())
	if res.ExitCode != 0 || got != fmt.Sprint(len(secret)) {
		return executor.Check{Name: name, Detail: fmt.Sprintf("the step ended %d %s, said %q", res.ExitCode, res.Reason, got),
			Fix: "the image needs /bin/sh, test, printf and wc"}
	}
	if err := s.Cleanup(ctx); err != nil {
		return executor.Check{Name: name, Detail: "removing the test container: " + err.Error()}
	}
	return executor.Check{Name: name, OK: true, Detail: fmt.Sprintf("image %s: a step got its secret over the agent's stream; started, run and removed in %s", e.cfg.Image, time.Since(t0).Round(time.Millisecond))}
}
