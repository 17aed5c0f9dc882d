package agentenv

import (
	"debug/elf"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/executor"
)

// machines maps ELF machines to GOARCH, the architectures Kubernetes and
// Go name (kubernetes.io/arch).
var machines = map[elf.Machine]string{
	elf.EM_X86_64: "amd64", elf.EM_AARCH64: "arm64", elf.EM_386: "386", elf.EM_ARM: "arm",
	elf.EM_PPC64: "ppc64le", elf.EM_S390: "s390x", elf.EM_RISCV: "riscv64",
}

// UnameArch maps what `uname -m` prints to GOARCH ("x86_64" → "amd64",
// "aarch64" → "arm64"); "" for a machine it does not know.
func UnameArch(machine string) string {
	switch strings.TrimSpace(machine) {
	case "x86_64", "amd64":
		return "amd64"
	case "aarch64", "arm64", "aarch64_be":
		return "arm64"
	case "i386", "i486", "i586", "i686":
		return "386"
	case "armv7l", "armv7", "armv6l", "armv8l":
		return "arm"
	case "ppc64le":
		return "ppc64le"
	case "s390x":
		return "s390x"
	case "riscv64":
		return "riscv64"
	}
	return ""
}

// ProgramArch returns the architecture (GOARCH) of the program at path,
// which must be a static Linux ELF executable, as the step agent is built
// (CGO_ENABLED=0): it runs in any image, whatever its libc. Errors: not an
// ELF file, a dynamically linked one (it names its interpreter), or one of
// an architecture no Kubernetes node has.
func ProgramArch(path string) (string, error) {
	f, err := elf.Open(path)
	if err != nil {
		var fe *elf.FormatError
		if errors.As(err, &fe) {
			return "", fmt.Errorf("%s is not a Linux program (ELF): %v", path, err)
		}
		return "", err
	}
	defer f.Close()
	arch, ok := machines[f.Machine]
	if !ok {
		return "", fmt.Errorf("%s is a program for machine %s, not one a Kubernetes node runs", path, f.Machine)
	}
	if f.Machine == elf.EM_PPC64 && f.ByteOrder.String() != "LittleEndian" {
		return "", fmt.Errorf("%s is a big-endian ppc64 program", path)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return "", fmt.Errorf("%s (linux/%s) is dynamically linked: the step agent must be static (build it with CGO_ENABLED=0, as make build does)", path, arch)
		}
	}
	return arch, nil
}

// Agents are the step agent programs a runner can deliver, by the
// architecture (GOARCH) each is built for.
type Agents map[string]string

// AgentFile is the name of the step agent for linux/arch beside
// knotless-run: knotless-agent-linux-ARCH (a release's file names).
func AgentFile(arch string) string { return AgentName + "-linux-" + arch }

// FindAgents returns the step agents a runner has: the one at path (or
// FindAgent's, when empty) and every knotless-agent-linux-ARCH beside it.
// At least one must exist; each is checked with ProgramArch, and a file
// named for one architecture but built for another is refused. Errors say
// which file and what to do.
func FindAgents(path string) (Agents, error) {
	var dir string
	found := Agents{}
	if path == "" {
		if p, err := FindAgent(); err == nil {
			path = p
		} else if self, serr := os.Executable(); serr == nil {
			dir = filepath.Dir(self) // a release's suffixed files alone
		} else {
			return nil, err
		}
	}
	if path != "" {
		abs, err := ResolveAgent(path)
		if err != nil {
			return nil, err
		}
		arch, err := ProgramArch(abs)
		if err != nil {
			return nil, fmt.Errorf("--agent %s: %w", path, err)
		}
		found[arch] = abs
		dir = filepath.Dir(abs)
	}
	matches, _ := filepath.Glob(filepath.Join(dir, AgentName+"-linux-*"))
	for _, m := range matches {
		named := strings.TrimPrefix(filepath.Base(m), AgentName+"-linux-")
		arch, err := ProgramArch(m)
		if err != nil {
			return nil, err
		}
		if arch != named {
			return nil, fmt.Errorf("%s is built for linux/%s, not linux/%s as its name says", m, arch, named)
		}
		if _, have := found[arch]; !have {
			found[arch] = m
		}
	}
	if len(found) == 0 {
		return nil, fmt.Errorf("no step agent (%s or %s-linux-ARCH) in %s: install it beside knotless-run, or give its path with --agent", AgentName, AgentName, dir)
	}
	return found, nil
}

// Arches lists the architectures of a, sorted.
func (a Agents) Arches() []string {
	out := make([]string, 0, len(a))
	for arch := range a {
		out = append(out, arch)
	}
	sort.Strings(out)
	return out
}

// For returns the agent for arch; the error says which architectures the
// runner has and what file to install.
func (a Agents) For(arch string) (string, error) {
	if p, ok := a[arch]; ok {
		return p, nil
	}
	return "", fmt.Errorf("this runner has no step agent for linux/%s (it has %s): install %s beside knotless-run", arch, strings.Join(a.Arches(), ", "), AgentFile(arch))
}

// HostAgent returns the agent for this machine's own architecture, for
// executors whose environments run on the runner's host (shell, docker).
func HostAgent(path string) (string, error) {
	agents, err := FindAgents(path)
	if err != nil {
		return "", err
	}
	p, err := agents.For(runtime.GOARCH)
	if err != nil {
		return "", fmt.Errorf("%w (the steps run on this host, linux/%s)", err, runtime.GOARCH)
	}
	return p, nil
}

// CheckHostArch fails spec whose `arch:` is not this host's, for executors
// whose environments run on the runner's host (shell, docker): a
// *executor.Fault (reason unsupported: no attempt here can run it) naming
// both and what to do.
func CheckHostArch(spec executor.Spec) error {
	if spec.Arch == "" || spec.Arch == runtime.GOARCH {
		return nil
	}
	return &executor.Fault{Reason: api.ReasonUnsupported, Message: fmt.Sprintf(
		"the workflow asks for arch: %s, and this runner's steps run on its own host, linux/%s: give the workflow runners: labels of a runner on linux/%s, or run it with the kube executor in a cluster that has such nodes",
		spec.Arch, runtime.GOARCH, spec.Arch)}
}
