//go:build !linux

package main

import "syscall"

// clusterProcAttr puts a process of the benchmark's cluster in its own
// process group (no parent-death signal outside Linux).
func clusterProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}

// killedWithParent is Linux's; elsewhere nothing.
func killedWithParent() *syscall.SysProcAttr { return &syscall.SysProcAttr{} }
