package docker

import (
	"fmt"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/mount"

	"knotless.dev/knotless/internal/executor"
)

// Labels every job container carries: the manager, the runner's name and
// the run's environment ID (executor.Spec.ID). Never secrets.
const (
	LabelManagedBy = "app.kubernetes.io/managed-by"
	ManagedBy      = "knotless"
	LabelRunner    = "knotless.dev/runner"
	LabelRun       = "knotless.dev/run"
	LabelExecutor  = "knotless.dev/executor"
)

// Paths inside the job container. The root file system is read-only;
// AgentDir, Home and Tmp are tmpfs mounts, Workspace is the checkout
// bind-mounted from the runner's disk.
const (
	// AgentDir holds the agent's state (step output files, exit statuses)
	// and its socket.
	AgentDir = "/knotless"
	// AgentPath is where the runner's knotless-agent is bind-mounted
	// read-only.
	AgentPath = "/knotless-agent"
	// AgentSocket is the agent's Unix socket.
	AgentSocket = AgentDir + "/agent.sock"
	// AgentState is the agent's state directory.
	AgentState = AgentDir + "/state"
	// Workspace is the checkout, the steps' working directory.
	Workspace = "/workspace"
	// Home is the steps' HOME.
	Home = "/home/knotless"
	// Tmp is /tmp.
	Tmp = "/tmp"
)

// defaultPATH is the steps' PATH when a step sets none.
const defaultPATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// RunAs, DefaultRunAs and ParseRunAs are the executors' shared --run-as.
type RunAs = executor.RunAs

// DefaultRunAs is UID:GID 1000:1000.
var DefaultRunAs = executor.DefaultRunAs

// ParseRunAs reads --run-as: see executor.ParseRunAs.
var ParseRunAs = executor.ParseRunAs

// userOf is the container's User for r: "UID:GID".
func userOf(r RunAs) string { return fmt.Sprintf("%d:%d", r.UID, r.GID) }

// imageUser reads an image's numeric USER ("UID", "UID:GID"); root, an
// empty USER (root) and names are refused with what to do.
func imageUser(image, user string) (RunAs, error) {
	if user == "" {
		return RunAs{}, fmt.Errorf("--run-as image: the image %s has no USER (it would run as root): give --run-as UID:GID", image)
	}
	r, err := ParseRunAs(user)
	if err != nil {
		return RunAs{}, fmt.Errorf("--run-as image: the image %s has USER %q: it must be numeric and not root (UID:GID); give --run-as UID:GID", image, user)
	}
	return r, nil
}

// containerSpec is what containerFor needs to build one job container.
type containerSpec struct {
	Image     string
	Labels    map[string]string
	RunAs     RunAs
	NanoCPUs  int64
	Memory    int64 // bytes; also each tmpfs's size
	Pids      int64 // 0: no limit
	Runtime   string
	Network   string
	Agent     string // the agent program on the runner's disk
	Workspace string // the checkout on the runner's disk
	// Cmd is the agent's argv (agentCommand).
	Cmd []string
}

// containerFor returns the job container's config, hardened by default:
// a numeric non-root user, a read-only root file system with tmpfs mounts
// (mode 0700 for HOME and the agent's directory, owned by the user; 1777
// for /tmp; each at most Memory bytes, charged to the container's memory
// like any page), CapDrop ALL, no-new-privileges, no privileged mode,
// private PID and IPC namespaces, no docker socket nor any host path but
// the agent (read-only) and the checkout, the network Network (never the
// host's), Memory with MemorySwap equal (no swap), NanoCPUs, PidsLimit,
// Runtime. The agent is the entry point and PID 1 (no Init): it reaps
// orphans and exits on SIGTERM, so a stop is prompt. Nothing secret is in
// it: no Env, the argv is fixed or derived from the run's ID and deadline.
func containerFor(s containerSpec) (*container.Config, *container.HostConfig) {
	uid, gid := s.RunAs.UID, s.RunAs.GID
	owned := func(mode string) string {
		return fmt.Sprintf("rw,exec,nosuid,nodev,size=%d,mode=%s,uid=%d,gid=%d", s.Memory, mode, uid, gid)
	}
	cfg := &container.Config{
		Image:           s.Image,
		User:            userOf(s.RunAs),
		Entrypoint:      s.Cmd,
		Cmd:             nil,
		WorkingDir:      Workspace,
		Labels:          s.Labels,
		AttachStdin:     false,
		OpenStdin:       false,
		Tty:             false,
		NetworkDisabled: s.Network == "none",
		StopSignal:      "SIGTERM",
		StopTimeout:     ptr(2),
	}
	pids := s.Pids
	hc := &container.HostConfig{
		NetworkMode:    container.NetworkMode(s.Network),
		ReadonlyRootfs: true,
		CapDrop:        []string{"ALL"},
		SecurityOpt:    []string{"no-new-privileges=true"},
		Privileged:     false,
		IpcMode:        "private",
		Init:           ptr(false),
		Runtime:        s.Runtime,
		RestartPolicy:  container.RestartPolicy{Name: container.RestartPolicyDisabled},
		Tmpfs: map[string]string{
			AgentDir: owned("0700"),
			Home:     owned("0700"),
			Tmp:      fmt.Sprintf("rw,exec,nosuid,nodev,size=%d,mode=1777", s.Memory),
		},
		Mounts: []mount.Mount{
			{Type: mount.TypeBind, Source: s.Agent, Target: AgentPath, ReadOnly: true},
			{Type: mount.TypeBind, Source: s.Workspace, Target: Workspace, ReadOnly: false},
		},
		Resources: container.Resources{
			NanoCPUs:   s.NanoCPUs,
			Memory:     s.Memory,
			MemorySwap: s.Memory,
		},
	}
	if pids > 0 {
		hc.Resources.PidsLimit = &pids
	}
	return cfg, hc
}

// agentCommand is the agent's argv as PID 1 of the container.
func agentCommand(runID string, deadline time.Time, extra []string) []string {
	argv := []string{AgentPath, "serve", "--dir", AgentState, "--socket", AgentSocket,
		"--workdir", Workspace, "--home", Home, "--tmp", "/tmp", "--path", defaultPATH, "--run", runID}
	if !deadline.IsZero() {
		argv = append(argv, "--deadline", deadline.UTC().Format(time.RFC3339Nano))
	}
	return append(argv, extra...)
}

func ptr[T any](v T) *T { return &v }
