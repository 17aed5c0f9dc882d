package docker

import (
	"fmt"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/mount"

	"knotless.dev/knotless/internal/executor"
	"knotless.dev/knotless/internal/executor/agentenv"
)

// Paths inside the job container: the root file system is read-only;
// agentenv.AgentDir, agentenv.Home and agentenv.Tmp are tmpfs mounts,
// agentenv.Workspace is the checkout bind-mounted from the runner's disk.
const (
	AgentDir    = agentenv.AgentDir
	AgentSocket = agentenv.AgentSocket
	Workspace   = agentenv.Workspace
	Home        = agentenv.Home
	// AgentPath is where the runner's knotless-agent is bind-mounted
	// read-only.
	AgentPath = "/knotless-agent"
)

// RunAs is the executors' shared --run-as (executor.RunAs).
type RunAs = executor.RunAs

// userOf is the container's User for r: "UID:GID".
func userOf(r RunAs) string { return fmt.Sprintf("%d:%d", r.UID, r.GID) }

// imageUser reads an image's numeric USER ("UID", "UID:GID"); root, an
// empty USER (root) and names are refused with what to do.
func imageUser(image, user string) (RunAs, error) {
	if user == "" {
		return RunAs{}, fmt.Errorf("--run-as image: the image %s has no USER (it would run as root): give --run-as UID:GID", image)
	}
	r, err := executor.ParseRunAs(user)
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
	hc := hardened(s, container.NetworkMode(s.Network), s.NanoCPUs, s.Memory)
	hc.Tmpfs[AgentDir] = owned("0700")
	hc.Tmpfs[Home] = owned("0700")
	hc.Mounts = []mount.Mount{
		{Type: mount.TypeBind, Source: s.Agent, Target: AgentPath, ReadOnly: true},
		{Type: mount.TypeBind, Source: s.Workspace, Target: Workspace, ReadOnly: false},
	}
	return cfg, hc
}

// hardened is the host config the job's container and its services share:
// network, a read-only root file system with a tmpfs /tmp of memory
// bytes, CapDrop ALL, no-new-privileges, no privileged mode, a private IPC
// namespace, no init, s's runtime and pids limit, no restart, nanoCPUs,
// and memory with no swap.
func hardened(s containerSpec, network container.NetworkMode, nanoCPUs, memory int64) *container.HostConfig {
	hc := &container.HostConfig{
		NetworkMode:    network,
		ReadonlyRootfs: true,
		CapDrop:        []string{"ALL"},
		SecurityOpt:    []string{"no-new-privileges=true"},
		Privileged:     false,
		IpcMode:        "private",
		Init:           ptr(false),
		Runtime:        s.Runtime,
		RestartPolicy:  container.RestartPolicy{Name: container.RestartPolicyDisabled},
		Tmpfs: map[string]string{
			agentenv.Tmp: fmt.Sprintf("rw,exec,nosuid,nodev,size=%d,mode=1777", memory),
		},
		Resources: container.Resources{
			NanoCPUs:   nanoCPUs,
			Memory:     memory,
			MemorySwap: memory,
		},
	}
	if pids := s.Pids; pids > 0 {
		hc.Resources.PidsLimit = &pids
	}
	return hc
}

func ptr[T any](v T) *T { return &v }
