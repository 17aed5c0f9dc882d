package s3test

import "syscall"

// procAttr ends the server with the test process (PR_SET_PDEATHSIG), so a
// killed test leaves no server behind.
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
