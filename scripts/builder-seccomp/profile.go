package main

import (
	"encoding/json"
	"fmt"
	"runtime"
	"runtime/debug"
	"slices"
	"syscall"

	"github.com/containerd/containerd/v2/contrib/seccomp"
	"github.com/opencontainers/runtime-spec/specs-go"
)

// ProfilePath is the profile's file, relative to this module's directory.
const ProfilePath = "../../deploy/kubernetes/builds/builder-seccomp.json"

// BuilderCapabilities are the builder container's capabilities
// (internal/executor/kube/builds.go adds them, all others dropped):
// containerd's RuntimeDefault depends on them.
var BuilderCapabilities = []string{"CAP_SETUID", "CAP_SETGID", "CAP_SETFCAP"}

// Additions are the rules the builder's profile adds to RuntimeDefault,
// after it (docs/container-builds.md's table says why each): what
// BuildKit and runc do inside the user and mount namespace nested in the
// pod's. keyctl answers ENOSYS, so that runc goes on without a session
// keyring instead of failing on EPERM.
var Additions = []specs.LinuxSyscall{
	{Names: []string{"mount", "umount2", "unshare", "setns", "pivot_root", "sethostname"}, Action: specs.ActAllow},
	{Names: []string{"keyctl"}, Action: specs.ActErrno, ErrnoRet: ptr(uint(syscall.ENOSYS))},
}

// CloneAllowed are the namespace flags the builder's profile lets clone
// create: RuntimeDefault's clone rule (a masked-equal of its first
// argument against every CLONE_NEW* flag) without these in its mask.
const CloneAllowed = syscall.CLONE_NEWUSER | syscall.CLONE_NEWNS

// Profile returns the builder's profile: containerd's DefaultProfile for
// a container with BuilderCapabilities, run here (amd64: architectures
// x86_64, x86, x32), with CloneAllowed taken out of the clone rule's mask
// and Additions appended; then, for arm64 nodes, containerd's arm64
// architectures (arm, aarch64) and its arm64 syscalls, read from the
// source of the containerd module this is built with (ContainerdArm64),
// inserted after the amd64 ones.
//
// Why one profile for both: DefaultProfile's only differences between
// amd64 and arm64 are the architectures and one rule of arch-specific
// names (the rest is the same source, constants alike on both), and runc
// ignores a name the node's architecture does not know
// (libcontainer/seccomp: "unknown seccomp syscall ... ignored"), as it
// already does for containerd's own profiles, whose common list names
// syscalls of only one of their architectures (chown32 on x86_64, open on
// aarch64). So on either node this profile is exactly that node's
// RuntimeDefault plus the additions, and the DaemonSet writes one file.
//
// Errors: not on amd64; containerd's profile or source no longer has the
// shape this expects (a clone rule, one arm64 branch).
func Profile() (*specs.LinuxSeccomp, error) {
	if runtime.GOARCH != "amd64" {
		return nil, fmt.Errorf("run on amd64: containerd's profile here would be %s's, and this program knows how to add arm64's to amd64's only", runtime.GOARCH)
	}
	p := RuntimeDefault()
	arm, err := ContainerdArm64()
	if err != nil {
		return nil, err
	}
	amd, err := containerdArch("amd64")
	if err != nil {
		return nil, err
	}
	at := slices.IndexFunc(p.Syscalls, func(s specs.LinuxSyscall) bool { return slices.Equal(s.Names, amd.Syscalls) })
	if at < 0 {
		return nil, fmt.Errorf("containerd's profile has no rule of its amd64 syscalls %v", amd.Syscalls)
	}
	p.Architectures = append(p.Architectures, arm.Architectures...)
	p.Syscalls = slices.Insert(p.Syscalls, at+1, specs.LinuxSyscall{Names: arm.Syscalls, Action: specs.ActAllow, Args: []specs.LinuxSeccompArg{}})
	clone := slices.IndexFunc(p.Syscalls, isCloneRule)
	if clone < 0 {
		return nil, fmt.Errorf("containerd's profile has no clone rule masking CLONE_NEW* flags")
	}
	p.Syscalls[clone].Args[0].Value &^= CloneAllowed
	for _, a := range Additions {
		for _, s := range p.Syscalls {
			for _, n := range a.Names {
				if slices.Contains(s.Names, n) {
					return nil, fmt.Errorf("containerd's profile has a rule for %s already: %+v", n, s)
				}
			}
		}
	}
	p.Syscalls = append(p.Syscalls, Additions...)
	return p, nil
}

// ProfileJSON is Profile as the file holds it: indented JSON, a newline
// at the end.
func ProfileJSON() ([]byte, error) {
	p, err := Profile()
	if err != nil {
		return nil, err
	}
	b, err := json.MarshalIndent(p, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// RuntimeDefault is containerd's DefaultProfile for the builder's
// container (BuilderCapabilities) on this machine's architecture and
// kernel (ptrace and process_vm_* need Linux 4.8, which user namespaces'
// 6.3 passes).
func RuntimeDefault() *specs.LinuxSeccomp {
	return seccomp.DefaultProfile(&specs.Spec{Process: &specs.Process{Capabilities: &specs.LinuxCapabilities{
		Bounding: BuilderCapabilities, Effective: BuilderCapabilities, Permitted: BuilderCapabilities,
	}}})
}

// ContainerdVersion is the version of the containerd module this program
// is built with ("" when the build has no module information).
func ContainerdVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			if d.Path == containerdModule {
				return d.Version
			}
		}
	}
	return ""
}

// isCloneRule tells RuntimeDefault's rule for clone without CAP_SYS_ADMIN:
// allowed when the first argument has none of the CLONE_NEW* flags.
func isCloneRule(s specs.LinuxSyscall) bool {
	return slices.Equal(s.Names, []string{"clone"}) && s.Action == specs.ActAllow && len(s.Args) == 1 &&
		s.Args[0].Index == 0 && s.Args[0].Op == specs.OpMaskedEqual && s.Args[0].Value&CloneAllowed == CloneAllowed
}

func ptr[T any](v T) *T { return &v }
