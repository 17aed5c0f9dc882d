package stepagent

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// cgroups makes one cgroup v2 per step below the agent's own cgroup, when
// that is delegated to it (writable), so that a step's processes can be
// found and killed as one (cgroup.kill) however they detach. Where there
// is no cgroup v2 hierarchy, or the agent's cgroup is not writable, the
// agent relies on being a child subreaper alone; reason says why.
type cgroups struct {
	base   string // the agent's own cgroup directory; "" when unusable
	reason string // why base is "" (for the log)
}

// detectCgroups finds the agent's cgroup v2 directory from
// /proc/self/cgroup ("0::/PATH") and /proc/self/mountinfo, and checks that
// a child cgroup can be made in it.
func detectCgroups() cgroups {
	rel, err := ownCgroupV2()
	if err != nil {
		return cgroups{reason: err.Error()}
	}
	mnt, err := cgroup2Mount()
	if err != nil {
		return cgroups{reason: err.Error()}
	}
	own := filepath.Join(mnt, rel)
	// Steps go below a cgroup of this agent's own: agents of concurrent
	// runs share the cgroup they were started in, and step IDs repeat.
	base := filepath.Join(own, fmt.Sprintf("knotless-agent-%d", os.Getpid()))
	if err := os.Mkdir(base, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return cgroups{reason: fmt.Sprintf("the agent's cgroup %s is not delegated to it (%v)", own, unwrapPath(err))}
	}
	return cgroups{base: base}
}

// remove removes the agent's cgroup (once no step cgroup is left in it).
func (c cgroups) remove() {
	if c.base != "" {
		_ = os.Remove(c.base)
	}
}

func unwrapPath(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

func ownCgroupV2() (string, error) {
	f, err := os.Open("/proc/self/cgroup")
	if err != nil {
		return "", fmt.Errorf("no cgroup information (%v)", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "0::"); ok {
			return rest, nil
		}
	}
	return "", errors.New("no cgroup v2 hierarchy")
}

func cgroup2Mount() (string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return "", fmt.Errorf("no mount information (%v)", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPER
		fields := strings.Fields(sc.Text())
		for i, fld := range fields {
			if fld == "-" && i+1 < len(fields) && fields[i+1] == "cgroup2" && len(fields) > 4 && fields[3] == "/" {
				return unescapeMount(fields[4]), nil
			}
		}
	}
	return "", errors.New("cgroup v2 is not mounted (cgroup v1 only)")
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// usable reports whether steps get their own cgroup.
func (c cgroups) usable() bool { return c.base != "" }

// describe says which mechanism ends a step's processes, for the log.
func (c cgroups) describe() string {
	if c.usable() {
		return fmt.Sprintf("cgroup v2 (%s) and child subreaper", c.base)
	}
	return fmt.Sprintf("child subreaper (no step cgroup: %s)", c.reason)
}

// create makes the step's cgroup and returns its directory and an open
// descriptor for clone3's CLONE_INTO_CGROUP (the caller closes it).
func (c cgroups) create(stepID string) (string, int, error) {
	dir := filepath.Join(c.base, "step-"+stepID)
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return "", -1, err
	}
	fd, err := syscall.Open(dir, syscall.O_DIRECTORY|syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		_ = os.Remove(dir)
		return "", -1, err
	}
	return dir, fd, nil
}

// kill ends every process in the cgroup dir: cgroup.kill where the kernel
// has it (5.14+), else SIGKILL to each of cgroup.procs, until it is empty
// or bound passes; then it removes the cgroup. It reports whether the
// cgroup emptied.
func killCgroup(dir string, bound time.Duration) bool {
	deadline := time.Now().Add(bound)
	delay := time.Millisecond
	for {
		if err := os.WriteFile(filepath.Join(dir, "cgroup.kill"), []byte("1"), 0); err != nil {
			for _, pid := range cgroupProcs(dir) {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		if len(cgroupProcs(dir)) == 0 {
			// rmdir fails while zombies are still attached; they go when
			// the reaper collects them.
			for time.Now().Before(deadline) {
				if err := os.Remove(dir); err == nil || errors.Is(err, os.ErrNotExist) {
					break
				}
				time.Sleep(delay)
			}
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(delay)
		delay = min(2*delay, 50*time.Millisecond)
	}
}

func cgroupProcs(dir string) []int {
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		return nil
	}
	var out []int
	for _, l := range strings.Fields(string(b)) {
		if pid, err := strconv.Atoi(l); err == nil {
			out = append(out, pid)
		}
	}
	return out
}

// signalCgroup sends sig to every process of the cgroup dir.
func signalCgroup(dir string, sig syscall.Signal) {
	for _, pid := range cgroupProcs(dir) {
		_ = syscall.Kill(pid, sig)
	}
}

// KillCgroup SIGKILLs every process in the cgroup directory dir (a step's
// cgroup an agent recorded, for cleaning up after an agent that died) and
// removes it when it empties; it reports how many processes it found.
func KillCgroup(dir string) int {
	n := len(cgroupProcs(dir))
	killCgroup(dir, killBound)
	return n
}
