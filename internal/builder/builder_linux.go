package builder

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Run shares the client, then starts the daemon in a new user and mount
// namespace that maps every uid and gid of the current one (mapSize of
// /proc/self/uid_map and gid_map, 0 to 0), or with HostIDs the range
// HostIDs..+HostIDsSize of it (idMaps), and waits for it as PID 1:
// SIGTERM, SIGINT, SIGHUP and SIGQUIT are passed on, orphans reaped. It
// returns the daemon's exit status (128+signal when killed). Errors:
// the client cannot be copied, the maps cannot be read, the namespace
// cannot be made (the container lacks CAP_SETUID, CAP_SETGID or
// CAP_SETFCAP, or its seccomp profile refuses clone with
// CLONE_NEWUSER|CLONE_NEWNS: RuntimeDefault does).
func Run(c Config) (int, error) {
	if len(c.Daemon) == 0 {
		return 0, errors.New("no daemon to run")
	}
	client, err := exec.LookPath("buildctl")
	if err != nil {
		return 0, fmt.Errorf("find the client: %w", err)
	}
	if err := copyFile(client, filepath.Join(c.Share, "bin", "buildctl")); err != nil {
		return 0, fmt.Errorf("share the client: %w", err)
	}
	uids, gids, err := idMaps(c.HostIDs)
	if err != nil {
		return 0, err
	}
	if c.HostIDs > 0 {
		c.OpenSocket = true
		if err := ownDirs(c.HostIDs, c.Share, c.Own); err != nil {
			return 0, err
		}
	}
	path, err := exec.LookPath(c.Daemon[0])
	if err != nil {
		return 0, err
	}
	socket := filepath.Join(c.Share, "buildkitd.sock")
	argv := append(append([]string{}, c.Daemon...), "--addr=unix://"+socket)
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGCHLD)
	sys := &syscall.SysProcAttr{
		Cloneflags:                 syscall.CLONE_NEWUSER | syscall.CLONE_NEWNS,
		UidMappings:                uids,
		GidMappings:                gids,
		GidMappingsEnableSetgroups: true,
		Pdeathsig:                  syscall.SIGKILL,
	}
	if c.HostIDs > 0 {
		// The host's root, this process, is not in the new namespace's
		// map (the daemon would be its overflow uid, and refuse to run):
		// the child, with every capability of the namespace it made,
		// becomes its root before it execs.
		sys.Credential = &syscall.Credential{Uid: 0, Gid: 0}
	}
	pid, err := syscall.ForkExec(path, argv, &syscall.ProcAttr{
		Env:   os.Environ(),
		Files: []uintptr{0, 1, 2},
		Sys:   sys,
	})
	if err != nil {
		return 0, fmt.Errorf("start %s in a user namespace of its own: %w (the builder needs CAP_SETUID, CAP_SETGID and CAP_SETFCAP, and a seccomp profile that allows clone with CLONE_NEWUSER|CLONE_NEWNS: the Localhost profile deploy/kubernetes/builds installs)", path, err)
	}
	if c.HostIDs > 0 {
		if err := dropTo(c.HostIDs); err != nil {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			return 0, err
		}
	}
	if c.OpenSocket {
		go openSocket(socket, c.Stderr)
	}
	for s := range sigs {
		if s != syscall.SIGCHLD {
			_ = syscall.Kill(pid, s.(syscall.Signal))
			continue
		}
		for {
			var ws syscall.WaitStatus
			p, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
			if err != nil || p <= 0 {
				break
			}
			if p == pid {
				if ws.Signaled() {
					return 128 + int(ws.Signal()), nil
				}
				return ws.ExitStatus(), nil
			}
		}
	}
	return 0, nil
}

// idMaps is the daemon's uid and gid maps: with hostIDs 0 every id of the
// current namespace to itself (as many from 0 as its own maps have, so a
// pod's 65,536); else 0..HostIDsSize to hostIDs.., which the current
// namespace's maps must cover. Errors name what to do.
func idMaps(hostIDs int) (uids, gids []syscall.SysProcIDMap, err error) {
	for _, f := range []string{"/proc/self/uid_map", "/proc/self/gid_map"} {
		n, err := mapSize(f)
		if err != nil {
			return nil, nil, err
		}
		m := []syscall.SysProcIDMap{{ContainerID: 0, HostID: 0, Size: n}}
		if hostIDs > 0 {
			if hostIDs+HostIDsSize > n {
				return nil, nil, fmt.Errorf("--host-ids %d: %s maps only ids 0-%d, not %d-%d (a container in a user namespace of the engine's, userns-remap, needs no --host-ids: its root is not the host's)", hostIDs, f, n-1, hostIDs, hostIDs+HostIDsSize-1)
			}
			m = []syscall.SysProcIDMap{{ContainerID: 0, HostID: hostIDs, Size: HostIDsSize}}
		}
		if f == "/proc/self/uid_map" {
			uids = m
		} else {
			gids = m
		}
	}
	return uids, gids, nil
}

// ownDirs gives group gid write access to share (0775: the job's
// container searches it for the client and the socket) and to each of own
// (0770): the current process owns them (the container's root) and has
// CAP_SETGID but not CAP_CHOWN, so it joins gid first, which lets an
// owner give a file to a group of its own.
func ownDirs(gid int, share string, own []string) error {
	if err := syscall.Setgroups([]int{gid}); err != nil {
		return fmt.Errorf("join group %d to give it the builder's directories: %w (the builder needs CAP_SETGID)", gid, err)
	}
	for _, d := range append([]string{share}, own...) {
		mode := os.FileMode(0o770)
		if d == share {
			mode = 0o775
		}
		if err := os.MkdirAll(d, 0o700); err != nil {
			return err
		}
		if err := os.Chown(d, -1, gid); err != nil {
			return fmt.Errorf("give %s to group %d: %w", d, gid, err)
		}
		if err := os.Chmod(d, mode); err != nil {
			return err
		}
	}
	return nil
}

// dropTo makes the process uid and gid id, with no supplementary group:
// its capabilities go with its root (all three uids leave 0).
func dropTo(id int) error {
	if err := syscall.Setgroups(nil); err != nil {
		return fmt.Errorf("drop supplementary groups: %w", err)
	}
	if err := syscall.Setresgid(id, id, id); err != nil {
		return fmt.Errorf("become gid %d: %w", id, err)
	}
	if err := syscall.Setresuid(id, id, id); err != nil {
		return fmt.Errorf("become uid %d: %w", id, err)
	}
	return nil
}

// openSocket makes socket mode 0666 once it exists (within a minute).
func openSocket(socket string, stderr io.Writer) {
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if fi, err := os.Lstat(socket); err == nil && fi.Mode()&os.ModeSocket != 0 {
			if err := os.Chmod(socket, 0o666); err != nil && stderr != nil {
				fmt.Fprintf(stderr, "knotless-builder: chmod %s: %v\n", socket, err)
			}
			return
		}
	}
	if stderr != nil {
		fmt.Fprintf(stderr, "knotless-builder: %s did not appear within a minute\n", socket)
	}
}

// mapSize is how many ids from 0 up the map file (/proc/self/uid_map)
// maps without a gap. Errors: unreadable, or 0 unmapped.
func mapSize(file string) (int, error) {
	f, err := os.Open(file)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	ranges := map[int]int{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) != 3 {
			continue
		}
		in, err1 := strconv.Atoi(fs[0])
		n, err2 := strconv.Atoi(fs[2])
		if err1 == nil && err2 == nil {
			ranges[in] = n
		}
	}
	next := 0
	for ranges[next] > 0 {
		next += ranges[next]
	}
	if next == 0 {
		return 0, fmt.Errorf("%s maps no id from 0", file)
	}
	return next, nil
}

// copyFile copies the program src to dst (mode 0755), making dst's
// directory.
func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
