package kwok

import (
	"os"
	"path/filepath"
	"strings"
)

// PodDirEnv names, in an exec's or a pod's first process's environment,
// the directory that stands for the pod's file systems (PodHost).
const PodDirEnv = "KNOTLESS_KWOK_POD_DIR"

// PodUserEnv names, beside PodDirEnv, the UID:GID the pod's processes run
// as (its security context's runAsUser and runAsGroup); empty: root.
const PodUserEnv = "KNOTLESS_KWOK_POD_USER"

// podShellScript is /bin/sh in kwok's mount namespace (StartKwok). kwok
// runs an exec's command as it is, on this machine (its Exec objects
// choose only a directory, variables and a user); the kube executor's
// first exec is `/bin/sh -c SCRIPT` with absolute paths (/knotless, ...),
// which every pod would share. With PodDirEnv set (the pod's Exec object
// sets it), this shell enters a mount namespace of its own whose root is
// a tmpfs holding this machine's /usr, /etc, /dev, /proc and /sys and the
// pod's own /knotless, /workspace, /home/knotless and /tmp (directories
// under PodDirEnv), chroots there and runs the real shell with the same
// arguments: the pod's first process (PodHost) and each exec into the pod
// meet at the same /knotless, as in a pod; with PodUserEnv, as that user
// (chroot --userspec), who owns the pod's directories. Without it, it is the real
// shell. /usr is bound without its submounts: inside, /bin/sh is the
// real shell again.
const podShellScript = `#!REALSH
if [ -z "$` + PodDirEnv + `" ]; then exec REALSH "$@"; fi
exec /usr/bin/unshare --mount --propagation private REALSH -c '
set -e
p=$` + PodDirEnv + `; r=$p/root
mkdir -p "$r" "$p/knotless" "$p/workspace" "$p/home" "$p/tmp"
mount -t tmpfs -o mode=0755 tmpfs "$r"
for d in usr etc; do mkdir "$r/$d"; mount --bind "/$d" "$r/$d"; done
for d in dev proc sys; do mkdir "$r/$d"; mount --rbind "/$d" "$r/$d"; done
for d in bin sbin lib lib64; do [ -e "/usr/$d" ] && ln -s "usr/$d" "$r/$d"; done
mkdir -p "$r/knotless" "$r/workspace" "$r/home/knotless" "$r/tmp"
mount --bind "$p/knotless" "$r/knotless"; mount --bind "$p/workspace" "$r/workspace"
mount --bind "$p/home" "$r/home/knotless"; mount --bind "$p/tmp" "$r/tmp"
u=$` + PodUserEnv + `; unset ` + PodDirEnv + ` ` + PodUserEnv + `
if [ -n "$u" ]; then chown "$u" "$p/knotless" "$p/workspace" "$p/home" "$p/tmp"; set -- --userspec="$u" "$r" /usr/bin/dash "$@"; else set -- "$r" /usr/bin/dash "$@"; fi
cd /; exec /usr/sbin/chroot "$@"' podshell "$@"
`

// realShell is a copy of this machine's /bin/sh outside /usr, which
// kwok's mount namespace covers.
func (c *ControlPlane) realShell() string { return filepath.Join(c.Dir, "bin", "realsh") }

// writePodShell writes the real shell's copy and the pod shell script,
// and returns the script's path.
func (c *ControlPlane) writePodShell() (string, error) {
	src, err := filepath.EvalSymlinks("/bin/sh")
	if err != nil {
		return "", err
	}
	b, err := os.ReadFile(src)
	if err != nil {
		return "", err
	}
	if err := os.WriteFile(c.realShell(), b, 0o755); err != nil {
		return "", err
	}
	script := strings.ReplaceAll(podShellScript, "REALSH", c.realShell())
	path := filepath.Join(c.Dir, "bin", "podshell")
	return path, os.WriteFile(path, []byte(script), 0o755)
}
