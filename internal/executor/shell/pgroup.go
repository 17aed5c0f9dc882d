package shell

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// A session records the process group of its running step in this file, so
// that a runner killed with SIGKILL (which cannot clean up) leaves a trace
// the next runner's Sweep follows to kill what the step left running.
const pgroupFile = "pgroup"

// recordGroup writes "PGID STARTTIME" for the step's shell to the session
// directory. STARTTIME (clock ticks since boot, /proc/PID/stat field 22)
// tells the shell apart from a later process that reuses its PID.
func recordGroup(dir string, pgid int) error {
	st, err := procStartTime(pgid)
	if err != nil {
		return err
	}
	tmp := filepath.Join(dir, pgroupFile+".tmp")
	if err := os.WriteFile(tmp, []byte(fmt.Sprintf("%d %d\n", pgid, st)), 0o600); err != nil {
		return fmt.Errorf("record process group: %w", err)
	}
	return os.Rename(tmp, filepath.Join(dir, pgroupFile))
}

// forgetGroup removes the record once the step's group is gone.
func forgetGroup(dir string) { _ = os.Remove(filepath.Join(dir, pgroupFile)) }

// killRecordedGroup kills (SIGKILL) the process group recorded in dir by a
// runner process that died. It kills only when the group can still be ours:
// either the shell itself is alive with the recorded start time, or no
// process has the PGID as its PID (Linux does not hand out a PID that a live
// process group still uses as its ID, so the group's members are then what
// our step left behind). It reports whether it sent a signal.
func killRecordedGroup(dir string) (bool, error) {
	data, err := os.ReadFile(filepath.Join(dir, pgroupFile))
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("read process group record: %w", err)
	}
	var pgid int
	var start uint64
	if _, err := fmt.Sscanf(string(data), "%d %d", &pgid, &start); err != nil || pgid <= 1 {
		return false, fmt.Errorf("process group record %q is malformed", strings.TrimSpace(string(data)))
	}
	st, err := procStartTime(pgid)
	switch {
	case err == nil && st != start:
		return false, nil // the PID now belongs to an unrelated process
	case err != nil && !errors.Is(err, os.ErrNotExist):
		return false, err
	}
	err = syscall.Kill(-pgid, syscall.SIGKILL)
	if errors.Is(err, syscall.ESRCH) {
		return false, nil
	}
	return err == nil, err
}

// procStartTime reads field 22 (starttime) of /proc/PID/stat.
func procStartTime(pid int) (uint64, error) {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	// The command name (field 2) may hold spaces and parentheses: fields
	// after it start behind the last ')'.
	i := strings.LastIndexByte(string(data), ')')
	if i < 0 {
		return 0, fmt.Errorf("parse /proc/%d/stat", pid)
	}
	fields := strings.Fields(string(data[i+1:]))
	if len(fields) < 20 {
		return 0, fmt.Errorf("parse /proc/%d/stat: %d fields", pid, len(fields))
	}
	return strconv.ParseUint(fields[19], 10, 64) // field 22 overall
}
