package cleanup

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// RemoveAll removes dir like os.RemoveAll, with these differences:
//
//   - Read-only directories (Go's module cache makes them) do not stop it:
//     it makes them writable (0700) on its way down.
//   - It never crosses a file-system boundary. A mount it finds below dir
//     (or dir itself being a mount point) is detached (umount MNT_DETACH),
//     which leaves the mount's source untouched, and logged on log; if it
//     cannot be detached, the mount point is left as it is and the error
//     (a *MountsLeftError) names it.
//   - It never follows a symbolic link, and removes the entries it finds
//     relative to the directory it opened, so a step that swaps a
//     directory for a link while the runner cleans up cannot steer it
//     outside dir.
//
// A missing dir is not an error. log may be nil.
func RemoveAll(dir string, log *slog.Logger) error {
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if dir == "" {
		return nil
	}
	dir = filepath.Clean(dir)
	r := &remover{log: log, dir: dir}
	fi, err := os.Lstat(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		return ignoreMissing(os.Remove(dir))
	}
	// dir itself may be a mount point (a step mounted over its own
	// workspace): detach it first, else its contents are the mount's.
	parent, err := unix.Open(filepath.Dir(dir), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("remove %s: %w", dir, err)
	}
	defer unix.Close(parent)
	var pst unix.Statx_t
	if err := unix.Statx(parent, "", unix.AT_EMPTY_PATH, unix.STATX_MNT_ID, &pst); err != nil {
		return fmt.Errorf("remove %s: %w", dir, err)
	}
	r.dev = devOf(&pst)
	r.mnt, r.hasMnt = pst.Mnt_id, pst.Mask&unix.STATX_MNT_ID != 0
	name := filepath.Base(dir)
	if !r.sameMount(parent, name, dir) {
		return r.result()
	}
	if err := r.removeDir(parent, name, dir); err != nil {
		return err
	}
	return r.result()
}

type remover struct {
	log    *slog.Logger
	dir    string
	dev    uint64
	mnt    uint64
	hasMnt bool
	left   []string
}

func (r *remover) result() error {
	if len(r.left) > 0 {
		return &MountsLeftError{Dir: r.dir, Mounts: r.left}
	}
	return nil
}

func devOf(st *unix.Statx_t) uint64 { return unix.Mkdev(st.Dev_major, st.Dev_minor) }

// sameMount reports whether the directory name in the directory parentFD
// is on the file system being removed, detaching whatever is mounted on it
// until it is. It reports false (and records the mount as left) when a
// mount cannot be detached.
func (r *remover) sameMount(parentFD int, name, path string) bool {
	for attempt := 0; ; attempt++ {
		var st unix.Statx_t
		if err := unix.Statx(parentFD, name, unix.AT_SYMLINK_NOFOLLOW, unix.STATX_TYPE|unix.STATX_MNT_ID, &st); err != nil {
			return !errors.Is(err, unix.ENOENT) // gone: nothing to do; else let the removal report it
		}
		// The mount ID decides where the kernel has it (a btrfs subvolume
		// has a device of its own without being a mount); the device
		// only where it has not.
		var crossed bool
		if r.hasMnt && st.Mask&unix.STATX_MNT_ID != 0 {
			crossed = st.Mnt_id != r.mnt
		} else {
			crossed = devOf(&st) != r.dev
		}
		if !crossed {
			return true
		}
		if attempt == 8 {
			r.left = append(r.left, path+": still a mount point after 8 detaches")
			r.log.Error("left a mount in a directory being removed (its contents untouched)", "mount", path, "dir", r.dir)
			return false
		}
		// Through /proc/self/fd the path is the directory already opened,
		// whatever a step did to the path's components since.
		target := fmt.Sprintf("/proc/self/fd/%d/%s", parentFD, name)
		if err := unix.Unmount(target, unix.MNT_DETACH|unix.UMOUNT_NOFOLLOW); err != nil {
			r.left = append(r.left, fmt.Sprintf("%s: detach: %v", path, err))
			r.log.Error("left a mount in a directory being removed (its contents untouched): it could not be detached", "mount", path, "dir", r.dir, "err", err)
			return false
		}
		r.log.Warn("detached a mount a step left in a directory being removed (the mount's source is untouched)", "mount", path, "dir", r.dir)
	}
}

// removeDir removes the directory name (in parentFD) and what it holds,
// staying on the file system being removed.
func (r *remover) removeDir(parentFD int, name, path string) error {
	fd, err := unix.Openat(parentFD, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.EACCES) {
		_ = unix.Fchmodat(parentFD, name, 0o700, 0)
		fd, err = unix.Openat(parentFD, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	}
	if errors.Is(err, unix.ENOENT) {
		return nil
	}
	if errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.ELOOP) {
		// It became something else since: remove that, not what it names.
		return ignoreMissing(unix.Unlinkat(parentFD, name, 0))
	}
	if err != nil {
		return &os.PathError{Op: "open", Path: path, Err: err}
	}
	f := os.NewFile(uintptr(fd), path)
	defer f.Close()
	var st unix.Stat_t
	if unix.Fstat(fd, &st) == nil && st.Mode&0o700 != 0o700 {
		_ = unix.Fchmod(fd, 0o700)
	}
	var errs []error
	names, err := f.Readdirnames(-1)
	if err != nil {
		errs = append(errs, &os.PathError{Op: "readdir", Path: path, Err: err})
	}
	for _, n := range names {
		p := filepath.Join(path, n)
		var cst unix.Stat_t
		if err := unix.Fstatat(fd, n, &cst, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			if !errors.Is(err, unix.ENOENT) {
				errs = append(errs, &os.PathError{Op: "lstat", Path: p, Err: err})
			}
			continue
		}
		if cst.Mode&unix.S_IFMT == unix.S_IFDIR {
			if !r.sameMount(fd, n, p) {
				continue
			}
			if err := r.removeDir(fd, n, p); err != nil {
				errs = append(errs, err)
			}
			continue
		}
		// A file bind-mounted over a file: unlink fails (EBUSY) and
		// leaves the source alone; detach it first.
		if err := unix.Unlinkat(fd, n, 0); err != nil && !errors.Is(err, unix.ENOENT) {
			if errors.Is(err, unix.EBUSY) && r.detachFile(fd, n, p) {
				err = ignoreMissing(unix.Unlinkat(fd, n, 0))
			}
			if err != nil {
				errs = append(errs, &os.PathError{Op: "unlink", Path: p, Err: err})
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	if err := unix.Unlinkat(parentFD, name, unix.AT_REMOVEDIR); err != nil && !errors.Is(err, unix.ENOENT) {
		if len(r.left) > 0 && (errors.Is(err, unix.ENOTEMPTY) || errors.Is(err, unix.EEXIST)) {
			return nil // holds a mount point left; result() says so
		}
		return &os.PathError{Op: "remove", Path: path, Err: err}
	}
	return nil
}

// detachFile detaches a mount on the file name in dirFD.
func (r *remover) detachFile(dirFD int, name, path string) bool {
	target := fmt.Sprintf("/proc/self/fd/%d/%s", dirFD, name)
	if err := unix.Unmount(target, unix.MNT_DETACH|unix.UMOUNT_NOFOLLOW); err != nil {
		r.left = append(r.left, fmt.Sprintf("%s: detach: %v", path, err))
		r.log.Error("left a mounted file in a directory being removed (its source untouched)", "mount", path, "dir", r.dir, "err", err)
		return false
	}
	r.log.Warn("detached a file mount a step left in a directory being removed (the mount's source is untouched)", "mount", path, "dir", r.dir)
	return true
}

func ignoreMissing(err error) error {
	if err == nil || errors.Is(err, os.ErrNotExist) {
		return nil
	}
	return err
}
