package docker

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/mount"
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

// RunAs is the numeric user a job container runs as.
type RunAs struct {
	// Image keeps the image's own user, which must then be numeric and
	// not root.
	Image bool
	// UID and GID are used when Image is false.
	UID, GID int64
}

// DefaultRunAs is UID:GID 1000:1000 (the kube executor's default too).
var DefaultRunAs = RunAs{UID: 1000, GID: 1000}

// ParseRunAs reads "UID:GID", "UID" or "image", as the kube executor's
// --run-as does. UID 0 is refused: job containers never run as root.
func ParseRunAs(s string) (RunAs, error) {
	if s == "image" {
		return RunAs{Image: true}, nil
	}
	u, g, hasG := strings.Cut(s, ":")
	uid, err := strconv.ParseInt(u, 10, 64)
	if err != nil || uid < 0 {
		return RunAs{}, fmt.Errorf("--run-as %q: want UID:GID (numbers), UID, or image", s)
	}
	gid := uid
	if hasG {
		if gid, err = strconv.ParseInt(g, 10, 64); err != nil || gid < 0 {
			return RunAs{}, fmt.Errorf("--run-as %q: the GID is not a number", s)
		}
	}
	if uid == 0 {
		return RunAs{}, fmt.Errorf("--run-as %q: job containers never run as root (UID 0)", s)
	}
	return RunAs{UID: uid, GID: gid}, nil
}

// String is the flag's spelling.
func (r RunAs) String() string {
	if r.Image {
		return "image"
	}
	return fmt.Sprintf("%d:%d", r.UID, r.GID)
}

// user is the container's User: "UID:GID".
func (r RunAs) user() string { return fmt.Sprintf("%d:%d", r.UID, r.GID) }

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
		User:            s.RunAs.user(),
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
		"--workdir", Workspace, "--home", Home, "--path", defaultPATH, "--run", runID}
	if !deadline.IsZero() {
		argv = append(argv, "--deadline", deadline.UTC().Format(time.RFC3339Nano))
	}
	return append(argv, extra...)
}

func ptr[T any](v T) *T { return &v }
