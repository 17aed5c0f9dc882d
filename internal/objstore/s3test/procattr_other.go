//go:build !linux

package s3test

import "syscall"

// procAttr is nothing outside Linux (no parent-death signal).
func procAttr() *syscall.SysProcAttr { return nil }
