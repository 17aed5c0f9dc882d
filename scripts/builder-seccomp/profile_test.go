package main

import (
	"bytes"
	"encoding/json"
	"os"
	"regexp"
	"runtime"
	"slices"
	"testing"

	"github.com/opencontainers/runtime-spec/specs-go"
)

func skipUnlessAmd64(t *testing.T) {
	t.Helper()
	if runtime.GOARCH != "amd64" {
		t.Skipf("containerd's RuntimeDefault here is %s's; the profile is made and checked on amd64", runtime.GOARCH)
	}
}

func committed(t *testing.T) (raw []byte, p specs.LinuxSeccomp) {
	t.Helper()
	raw, err := os.ReadFile(ProfilePath)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &p); err != nil {
		t.Fatalf("%s: %v", ProfilePath, err)
	}
	return raw, p
}

// TestCommittedProfile_IsWhatThisProgramWrites fails when
// builder-seccomp.json was edited by hand (a syscall added, say) or
// containerd's profile changed without `make builder-seccomp`.
func TestCommittedProfile_IsWhatThisProgramWrites(t *testing.T) {
	skipUnlessAmd64(t)
	raw, _ := committed(t)
	want, err := ProfileJSON()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(raw, want) {
		t.Errorf("%s is not what `make builder-seccomp` writes (the additions live in profile.go): run it and commit the file", ProfilePath)
	}
}

// TestCommittedProfile_OnAmd64IsContainerdsRuntimeDefaultPlusTheAdditions
// takes from the committed file, independently of Profile: the
// Additions (once each, at the end), clone's mask without CloneAllowed,
// and the arm64 branch read from containerd's source; what is left must be
// containerd's DefaultProfile for the builder's container on this amd64
// machine, rule for rule (names, action, errno, arguments), with its
// architectures and default action.
func TestCommittedProfile_OnAmd64IsContainerdsRuntimeDefaultPlusTheAdditions(t *testing.T) {
	skipUnlessAmd64(t)
	_, p := committed(t)
	n := len(p.Syscalls) - len(Additions)
	if n < 0 || !jsonEqual(t, p.Syscalls[n:], Additions) {
		t.Fatalf("the profile does not end with the additions %s", mustJSON(t, Additions))
	}
	p.Syscalls = p.Syscalls[:n]

	clones := 0
	for i, s := range p.Syscalls {
		if slices.Contains(s.Names, "clone") && s.Action == specs.ActAllow {
			clones++
			if len(s.Args) != 1 || s.Args[0].Op != specs.OpMaskedEqual || s.Args[0].Value&CloneAllowed != 0 {
				t.Fatalf("clone's rule %s: want a mask without CLONE_NEWUSER and CLONE_NEWNS", mustJSON(t, s))
			}
			p.Syscalls[i].Args[0].Value |= CloneAllowed
		}
	}
	if clones != 1 {
		t.Fatalf("%d rules allow clone, want 1", clones)
	}

	arm, err := ContainerdArm64()
	if err != nil {
		t.Fatal(err)
	}
	p.Architectures = slices.DeleteFunc(p.Architectures, func(a specs.Arch) bool { return slices.Contains(arm.Architectures, a) })
	p.Syscalls = slices.DeleteFunc(p.Syscalls, func(s specs.LinuxSyscall) bool { return slices.Equal(s.Names, arm.Syscalls) })

	if want := RuntimeDefault(); !jsonEqual(t, p, want) {
		t.Errorf("the profile without the additions and arm64's branch:\n%s\nwant containerd %s's RuntimeDefault:\n%s", mustJSON(t, p), ContainerdVersion(), mustJSON(t, want))
	}
}

// TestCommittedProfile_HasContainerdsArm64Branch holds the part amd64
// cannot run against containerd's source: arm64's architectures (arm,
// aarch64) and each of its arm64-only syscalls allowed without condition.
func TestCommittedProfile_HasContainerdsArm64Branch(t *testing.T) {
	_, p := committed(t)
	arm, err := ContainerdArm64()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range arm.Architectures {
		if !slices.Contains(p.Architectures, a) {
			t.Errorf("architectures %v lack arm64's %s", p.Architectures, a)
		}
	}
	for _, name := range arm.Syscalls {
		if !slices.ContainsFunc(p.Syscalls, func(s specs.LinuxSyscall) bool {
			return slices.Contains(s.Names, name) && s.Action == specs.ActAllow && len(s.Args) == 0
		}) {
			t.Errorf("arm64's %s is not allowed", name)
		}
	}
	if len(arm.Architectures) != 2 || len(arm.Syscalls) < 3 {
		t.Errorf("containerd's arm64 branch as read: %+v, want two architectures and its arm syscalls", arm)
	}
}

// TestContainerdSource_Amd64BranchIsWhatDefaultProfileRunsHere checks the
// reader of containerd's source on the branch this machine runs: what it
// reads for amd64 is what DefaultProfile returns here.
func TestContainerdSource_Amd64BranchIsWhatDefaultProfileRunsHere(t *testing.T) {
	skipUnlessAmd64(t)
	amd, err := containerdArch("amd64")
	if err != nil {
		t.Fatal(err)
	}
	p := RuntimeDefault()
	if !slices.Equal(amd.Architectures, p.Architectures) {
		t.Errorf("read architectures %v, DefaultProfile's %v", amd.Architectures, p.Architectures)
	}
	if !slices.ContainsFunc(p.Syscalls, func(s specs.LinuxSyscall) bool { return slices.Equal(s.Names, amd.Syscalls) }) {
		t.Errorf("read amd64 syscalls %v, not a rule of DefaultProfile's", amd.Syscalls)
	}
}

// TestContainerdVersion_IsTheLocalClusters: the profile is the
// RuntimeDefault of the containerd the local cluster runs
// (test/cluster's ContainerdVersion).
func TestContainerdVersion_IsTheLocalClusters(t *testing.T) {
	src, err := os.ReadFile("../../test/cluster/build.go")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`ContainerdVersion\s*=\s*"([^"]+)"`).FindSubmatch(src)
	if m == nil {
		t.Fatal("test/cluster/build.go has no ContainerdVersion")
	}
	if got := ContainerdVersion(); got != string(m[1]) {
		t.Errorf("this module requires containerd %s, the local cluster runs %s: change go.mod, run `make builder-seccomp`", got, m[1])
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// jsonEqual compares as the file holds them (an empty Args is no Args).
func jsonEqual(t *testing.T, a, b any) bool {
	t.Helper()
	return bytes.Equal(mustJSON(t, a), mustJSON(t, b))
}
