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

// Config is what Run does.
type Config struct {
	// Share is the directory shared with the job's container (an
	// emptyDir): the client (buildctl on PATH) is copied to Share/bin/buildctl and the daemon
	// listens on Share/buildkitd.sock (the client's default address when
	// Share is /run/buildkit).
	Share string
	// OpenSocket makes the socket readable and writable by every uid of
	// the pod (0666, once it exists): for a job whose user is the image's
	// own, whose group is unknown. The directory is the pod's alone.
	OpenSocket bool
	// Daemon is the daemon's argv (buildkitd and its flags); Run adds
	// --addr unix://Share/buildkitd.sock.
	Daemon []string
	// Stderr receives Run's own messages.
	Stderr io.Writer
}

// Run shares the client, then starts the daemon in a new user and mount
// namespace that maps every uid and gid of the current one (mapSize of
// /proc/self/uid_map and gid_map, 0 to 0) and waits for it as PID 1:
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
	nu, err := mapSize("/proc/self/uid_map")
	if err != nil {
		return 0, err
	}
	ng, err := mapSize("/proc/self/gid_map")
	if err != nil {
		return 0, err
	}
	path, err := exec.LookPath(c.Daemon[0])
	if err != nil {
		return 0, err
	}
	socket := filepath.Join(c.Share, "buildkitd.sock")
	argv := append(append([]string{}, c.Daemon...), "--addr=unix://"+socket)
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGCHLD)
	pid, err := syscall.ForkExec(path, argv, &syscall.ProcAttr{
		Env:   os.Environ(),
		Files: []uintptr{0, 1, 2},
		Sys: &syscall.SysProcAttr{
			Cloneflags:                 syscall.CLONE_NEWUSER | syscall.CLONE_NEWNS,
			UidMappings:                []syscall.SysProcIDMap{{ContainerID: 0, HostID: 0, Size: nu}},
			GidMappings:                []syscall.SysProcIDMap{{ContainerID: 0, HostID: 0, Size: ng}},
			GidMappingsEnableSetgroups: true,
			Pdeathsig:                  syscall.SIGKILL,
		},
	})
	if err != nil {
		return 0, fmt.Errorf("start %s in a user namespace of its own: %w (the builder needs CAP_SETUID, CAP_SETGID and CAP_SETFCAP, and a seccomp profile that allows clone with CLONE_NEWUSER|CLONE_NEWNS: the Localhost profile deploy/kubernetes/builds installs)", path, err)
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
