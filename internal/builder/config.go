package builder

import "io"

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
	// HostIDs, when above 0, maps the daemon's uids and gids 0-65535 to
	// HostIDs..HostIDs+65535 of the current namespace instead of to
	// themselves: for a container whose root is the host's own (a Docker
	// engine without userns-remap, which gives no container a user
	// namespace), so that the build's root is an unprivileged range of the
	// host's uids all the same. Run then gives the group HostIDs the
	// Share directory (mode 0775) and each of Own (mode 0770), which the
	// container's root owns and the daemon must write to; once the daemon
	// runs, Run drops to uid and gid HostIDs itself (no capability left,
	// nothing of the host's root in the container) and makes the socket
	// 0666 (OpenSocket: the socket's group is one of the range, not the
	// job's). It needs the container's own map to cover the range.
	HostIDs int
	// Own lists the directories the daemon writes to besides Share (its
	// state, /tmp, /run), with HostIDs only.
	Own []string
}

// HostIDsSize is how many uids and gids the daemon's namespace has with
// Config.HostIDs: as many as a Kubernetes pod's user namespace.
const HostIDsSize = 65536
