// Package builder is the entrypoint of the builder sidecar that a kube job
// pod of a container build gets (docs/container-builds.md): it shares the
// BuildKit client with the job's container and runs BuildKit's daemon in
// a user and mount namespace of its own, nested in the pod's, where the
// daemon has the capabilities it needs to mount and to run build steps
// while the container itself has only SETUID, SETGID and SETFCAP of the
// pod's (unprivileged) user namespace.
//
// Run makes the nested namespace with the maps written by this process
// before the daemon execs (Go's SysProcAttr.UidMappings), so the daemon
// keeps its capabilities under no_new_privs (allowPrivilegeEscalation
// false); RootlessKit cannot (its child execs before its map exists, and
// regains no capability after). It stays the container's PID 1.
//
// The docker executor's builder container runs it too (Config.HostIDs):
// Docker gives a container no user namespace of its own, so its root is
// the host's, and Run maps the daemon's ids to an unprivileged range of
// the host's instead, then drops to that range itself. It must never
// leave a process of the host's root running in such a container.
package builder
