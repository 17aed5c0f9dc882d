package agentenv_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"knotless.dev/knotless/internal/agent/agenttest"
	"knotless.dev/knotless/internal/executor/agentenv"
)

// TestFindAgents_OneRunnerServesAmd64AndArm64Nodes: beside the agent a
// runner is given, the release's knotless-agent-linux-ARCH files are
// found, each checked to be the static program of the architecture its
// name says; one runner then delivers the right one to every node.
func TestFindAgents_OneRunnerServesAmd64AndArm64Nodes(t *testing.T) {
	agents, err := agentenv.FindAgents(agenttest.WithArch(t, "arm64"))
	if err != nil {
		t.Fatal(err)
	}
	if got := agents.Arches(); !slices.Contains(got, "amd64") || !slices.Contains(got, "arm64") {
		t.Fatalf("arches %v", got)
	}
	if _, err := agents.For("riscv64"); err == nil || !strings.Contains(err.Error(), "knotless-agent-linux-riscv64") {
		t.Errorf("a missing architecture: %v, want the file to install named", err)
	}
}

// TestFindAgents_RefusesAnAgentThatIsNotAStaticLinuxProgram: the runner
// refuses at start what would fail a run later: a dynamically linked
// agent (built with cgo), a file that is no program, and a file named for
// one architecture but built for another.
func TestFindAgents_RefusesAnAgentThatIsNotAStaticLinuxProgram(t *testing.T) {
	if _, err := agentenv.FindAgents("/bin/true"); err == nil || !strings.Contains(err.Error(), "dynamically linked") {
		t.Errorf("/bin/true: %v, want it refused as dynamically linked", err)
	}
	dir := t.TempDir()
	text := filepath.Join(dir, "knotless-agent")
	if err := os.WriteFile(text, []byte("#!/bin/sh\necho hi\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := agentenv.FindAgents(text); err == nil || !strings.Contains(err.Error(), "not a Linux program") {
		t.Errorf("a script: %v", err)
	}
	dir = t.TempDir()
	good := filepath.Join(dir, "knotless-agent")
	if err := os.Symlink(agenttest.Binary(t), good); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(agenttest.Binary(t), filepath.Join(dir, "knotless-agent-linux-arm64")); err != nil {
		t.Fatal(err)
	}
	if _, err := agentenv.FindAgents(good); err == nil || !strings.Contains(err.Error(), "built for linux/amd64, not linux/arm64") {
		t.Errorf("a mislabelled agent: %v", err)
	}
}

func TestUnameArch(t *testing.T) {
	for in, want := range map[string]string{"x86_64": "amd64", "aarch64": "arm64", "armv7l": "arm", "sparc": "", "unknown": ""} {
		if got := agentenv.UnameArch(in); got != want {
			t.Errorf("UnameArch(%q) = %q, want %q", in, got, want)
		}
	}
}
