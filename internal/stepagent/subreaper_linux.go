package stepagent

import "syscall"

// becomeSubreaper makes every orphaned descendant of this process its
// child, whatever its process group or session (a `setsid` daemon, a
// double fork), so that the agent can find and kill it.
func becomeSubreaper() error {
	_, _, errno := syscall.RawSyscall(syscall.SYS_PRCTL, prSetChildSubreaper, 1, 0)
	if errno != 0 {
		return errno
	}
	return nil
}

// inCgroup makes the process sys starts begin in the cgroup of the
// directory fd (clone3 CLONE_INTO_CGROUP).
func inCgroup(sys *syscall.SysProcAttr, fd int) {
	sys.UseCgroupFD, sys.CgroupFD = true, fd
}
