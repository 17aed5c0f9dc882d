package main

import "syscall"

// clusterProcAttr puts a process of the benchmark's cluster in its own
// process group and kills it when the benchmark dies (PR_SET_PDEATHSIG).
func clusterProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// killedWithParent kills the process when the benchmark dies
// (PR_SET_PDEATHSIG).
func killedWithParent() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
