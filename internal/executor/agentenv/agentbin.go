package agentenv

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// AgentName is the step agent's program name, looked up beside the
// running program and in PATH.
const AgentName = "knotless-agent"

// FindAgent returns the knotless-agent program, absolute: the one beside
// the running program, else the one in PATH. The error says where it
// looked and what to do.
func FindAgent() (string, error) {
	if self, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(self), AgentName)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() {
			return p, nil
		}
	}
	if p, err := exec.LookPath(AgentName); err == nil {
		return filepath.Abs(p)
	}
	dir := "the running program's directory"
	if self, err := os.Executable(); err == nil {
		dir = filepath.Dir(self)
	}
	return "", fmt.Errorf("the step agent %s is neither in %s nor in PATH: install it beside knotless-run, or give its path with --agent", AgentName, dir)
}

// ResolveAgent returns path made absolute when it names an executable
// regular file, FindAgent's answer when path is empty. Errors say what
// to give instead.
func ResolveAgent(path string) (string, error) {
	if path == "" {
		return FindAgent()
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", err
	}
	fi, err := os.Stat(abs)
	if err == nil && (!fi.Mode().IsRegular() || fi.Mode()&0o111 == 0) {
		err = errors.New("not an executable file")
	}
	if err != nil {
		return "", fmt.Errorf("--agent %s: %v: give the path of knotless-agent from the same release as knotless-run", path, err)
	}
	return abs, nil
}
