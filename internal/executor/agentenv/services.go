package agentenv

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/executor"
)

// Services is a driver's access to the service containers of one
// environment (executor.Spec.Services): Base hands them their secrets,
// waits for their probes, and reads their logs through it. The driver
// starts them with the environment (Make) and reports one that exited or
// cannot be pulled through Env.Why, naming it (reason service or
// image-pull).
type Services interface {
	// Exec runs argv in the container of service name, or in the job's
	// container when name is "", with stdin as its STDIN (nil for none),
	// and returns what it wrote to STDOUT and STDERR (at most 64 KiB) and
	// its exit code. An error means it could not be run at all.
	Exec(ctx context.Context, name string, argv []string, stdin []byte) (out []byte, code int, err error)
	// Log returns the end of service name's output (STDOUT and STDERR),
	// at most max bytes.
	Log(ctx context.Context, name string, max int64) ([]byte, error)
}

// Probe intervals of startServices.
const (
	serviceProbeEvery = 250 * time.Millisecond
)

// ServiceCommand is the argv a driver gives service s's container: its
// own Command (nil: the image's entrypoint and command) or, when it asks
// for secrets, the image's /bin/sh waiting for executor.ServiceSecretsDir
// /env (written by startServices over an exec), sourcing and removing it,
// and exec'ing Command. Nothing secret is in it.
func ServiceCommand(s executor.Service) []string {
	if len(s.Secrets) == 0 {
		return s.Command
	}
	f := executor.ServiceSecretsDir + "/env"
	script := `until [ -f ` + f + ` ]; do sleep 0.1 2>/dev/null || sleep 1; done; set -a; . ` + f + `; set +a; rm -f ` + f + `; exec "$@"`
	return append([]string{"/bin/sh", "-c", script, "knotless-service"}, s.Command...)
}

// secretsScript writes its STDIN to ServiceSecretsDir/env, atomically
// (the service's shell waits for the name), readable by its owner alone.
var secretsScript = `umask 077; d=` + executor.ServiceSecretsDir + `; cat > "$d/env.new" && mv "$d/env.new" "$d/env"`

// secretsFile is the file a service's shell sources: one `export
// NAME='value'` line per secret, in name order, each value single-quoted
// (a quote as '\”), so any byte but NUL passes through unchanged.
func secretsFile(secrets map[string]string) []byte {
	var b bytes.Buffer
	names := make([]string, 0, len(secrets))
	for n := range secrets {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		fmt.Fprintf(&b, "export %s='%s'\n", n, strings.ReplaceAll(secrets[n], "'", `'\''`))
	}
	return b.Bytes()
}

// startServices hands spec's services their secrets and waits until each
// is ready by its probes (executor.Service.Ports probed from the job's
// container with `knotless-agent probe --connected`, Ready run in its own), each
// within its ReadyTimeout; it writes to spec.Log when each is ready. A
// service that exits or cannot be pulled meanwhile ends the wait with
// env.Why's fault; one whose probes never pass with a *executor.Fault
// (reason service) naming it, what its probe last said and the end of its
// log. An environment without Services refuses services (reason service).
func startServices(ctx context.Context, spec executor.Spec, env *Env, executorName string) error {
	if len(spec.Services) == 0 {
		return nil
	}
	if env.Services == nil {
		return NoServices(spec, executorName)
	}
	for _, s := range spec.Services {
		if len(s.Secrets) == 0 {
			continue
		}
		out, code, err := env.Services.Exec(ctx, s.Name, []string{"/bin/sh", "-c", secretsScript}, secretsFile(s.Secrets))
		if err == nil && code != 0 {
			err = fmt.Errorf("exit code %d: %s", code, strings.TrimSpace(string(out)))
		}
		if err != nil {
			if f := env.Why(ctx); f != nil {
				return f
			}
			return &executor.Fault{Reason: api.ReasonService, Message: fmt.Sprintf(
				"service %s: its secrets could not be handed to it (its image needs /bin/sh, cat and mv): %v", s.Name, err)}
		}
	}
	for _, s := range spec.Services {
		if err := waitService(ctx, spec, env, s); err != nil {
			return err
		}
	}
	return nil
}

// waitService waits until service s is ready (see startServices).
func waitService(ctx context.Context, spec executor.Spec, env *Env, s executor.Service) error {
	timeout := s.ReadyTimeout
	if timeout <= 0 {
		timeout = 2 * time.Minute
	}
	start := time.Now()
	deadline := start.Add(timeout)
	var last string
	portsOK := len(s.Ports) == 0
	for {
		if f := env.Why(ctx); f != nil {
			return f
		}
		if !portsOK {
			argv := []string{env.AgentPath, "probe", "--timeout", "1s", "--connected"}
			for _, p := range s.Ports {
				argv = append(argv, "tcp:127.0.0.1:"+strconv.Itoa(p))
			}
			out, code, err := env.Services.Exec(ctx, "", argv, nil)
			switch {
			case err != nil:
				last = err.Error()
			case code == 0:
				portsOK = true
			default:
				last = probeWords(string(out))
			}
		}
		if portsOK && s.Ready == "" {
			break
		}
		if portsOK {
			out, code, err := env.Services.Exec(ctx, s.Name, []string{"/bin/sh", "-c", s.Ready}, nil)
			switch {
			case err != nil:
				last = err.Error()
			case code == 0:
				last = ""
			default:
				last = fmt.Sprintf("%q exited with code %d", s.Ready, code)
				if o := strings.TrimSpace(string(out)); o != "" {
					last += ": " + lastLines(o, 3)
				}
			}
			if err == nil && code == 0 {
				break
			}
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if time.Now().After(deadline) {
			msg := fmt.Sprintf("service %s (image %s) was not ready within %s (ready-timeout) by its probe: %s", s.Name, s.Image, timeout, probeText(s))
			if last != "" {
				msg += "; the probe last said: " + last
			}
			return &executor.Fault{Reason: api.ReasonService, Message: msg + "; its log is in the setup log"}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(serviceProbeEvery):
		}
	}
	if spec.Log != nil {
		fmt.Fprintf(spec.Log, "service %s (image %s) ready after %s (probe: %s)\n", s.Name, s.Image, time.Since(start).Round(time.Millisecond), probeText(s))
	}
	return nil
}

// WriteServiceLogs writes the end of each of spec's services' logs (at
// most 64 KiB each) to spec.Log, for a run whose services failed to start:
// what the service said is in the setup log before its environment goes.
func WriteServiceLogs(ctx context.Context, spec executor.Spec, svcs Services) {
	if spec.Log == nil || svcs == nil {
		return
	}
	for _, s := range spec.Services {
		b, err := svcs.Log(ctx, s.Name, 64<<10)
		if err != nil {
			fmt.Fprintf(spec.Log, "--- service %s: its log could not be read: %v\n", s.Name, err)
			continue
		}
		fmt.Fprintf(spec.Log, "--- service %s: its log ---\n%s", s.Name, b)
		if len(b) > 0 && b[len(b)-1] != '\n' {
			fmt.Fprintln(spec.Log)
		}
		fmt.Fprintf(spec.Log, "--- end of service %s's log ---\n", s.Name)
	}
}

// NoServices is the refusal of an executor that runs no images (shell)
// for a spec with services: a *executor.Fault with reason service naming
// them and what runs them; nil for a spec without.
func NoServices(spec executor.Spec, executorName string) error {
	if len(spec.Services) == 0 {
		return nil
	}
	return &executor.Fault{Reason: api.ReasonService, Message: fmt.Sprintf(
		"the %s executor runs no images, so no services: this workflow's services (%s) need a runner with the docker or kube executor", executorName, serviceNames(spec.Services))}
}

// probeWords turns `knotless-agent probe` lines ("tcp 127.0.0.1:5432
// reachable refused") into words for a person ("127.0.0.1:5432:
// connection refused"), joined by "; ".
func probeWords(out string) string {
	var parts []string
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Fields(l)
		if len(f) < 3 || f[0] != "tcp" {
			if l = strings.TrimSpace(l); l != "" {
				parts = append(parts, l)
			}
			continue
		}
		what := strings.Join(f[2:], " ")
		switch {
		case what == "reachable connected":
			continue
		case what == "reachable refused":
			what = "connection refused (nothing listens there yet)"
		case f[2] == "blocked" || f[2] == "unresolved":
			what = strings.Join(f[3:], " ")
		}
		parts = append(parts, f[1]+": "+what)
	}
	return strings.Join(parts, "; ")
}

// probeText says how a service's readiness is probed.
func probeText(s executor.Service) string {
	var parts []string
	if len(s.Ports) > 0 {
		var ps []string
		for _, p := range s.Ports {
			ps = append(ps, strconv.Itoa(p))
		}
		parts = append(parts, "TCP port "+strings.Join(ps, ", ")+" of 127.0.0.1")
	}
	if s.Ready != "" {
		parts = append(parts, strconv.Quote(s.Ready)+" exits 0")
	}
	if len(parts) == 0 {
		return "none (started is ready)"
	}
	return strings.Join(parts, ", then ")
}

func serviceNames(ss []executor.Service) string {
	names := make([]string, len(ss))
	for i, s := range ss {
		names[i] = s.Name
	}
	return strings.Join(names, ", ")
}

// lastLines is the last n non-empty lines of s, joined by " | ".
func lastLines(s string, n int) string {
	var lines []string
	for _, l := range strings.Split(s, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			lines = append(lines, l)
		}
	}
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}

// ServiceLog returns the end of service name's log, at most max bytes
// (executor.ServiceLogger).
func (s *Session) ServiceLog(ctx context.Context, name string, max int64) ([]byte, error) {
	env := s.cfg.Env
	if env == nil || env.Services == nil {
		return nil, fmt.Errorf("this environment runs no services")
	}
	return env.Services.Log(ctx, name, max)
}

// CappedBuffer keeps the first Max bytes written to it and drops the rest
// (writes never fail): an exec's output read whole.
type CappedBuffer struct {
	bytes.Buffer
	Max int
}

// Write implements io.Writer.
func (c *CappedBuffer) Write(p []byte) (int, error) {
	if room := c.Max - c.Len(); room > 0 {
		c.Buffer.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}
