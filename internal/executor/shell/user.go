package shell

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"

	"knotless.dev/knotless/internal/stepagent"
)

// LookupStepUser resolves --user NAME (a user name or a numeric UID) for a
// runner that runs as uid (os.Geteuid()): steps then run as that user,
// with its primary and supplementary groups. It refuses a runner that is
// not root (it could not switch users) and root itself as the step user.
func LookupStepUser(name string, uid int) (*stepagent.StepUser, error) {
	if uid != 0 {
		return nil, fmt.Errorf("--user %s: knotless-run runs as uid %d, not root, so it cannot run steps as another user; start it as root, or run it as %s and leave --user out", name, uid, name)
	}
	u, err := user.Lookup(name)
	if err != nil {
		var unknown user.UnknownUserError
		if _, numErr := strconv.Atoi(name); numErr == nil {
			u, err = user.LookupId(name)
		}
		if err != nil {
			if errors.As(err, &unknown) {
				return nil, fmt.Errorf("--user %s: no such user on this host (create it with useradd, or name an existing unprivileged user)", name)
			}
			return nil, fmt.Errorf("--user %s: %w", name, err)
		}
	}
	su := &stepagent.StepUser{Name: u.Username}
	id, err := strconv.ParseUint(u.Uid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("--user %s: UID %q: %w", name, u.Uid, err)
	}
	gid, err := strconv.ParseUint(u.Gid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("--user %s: GID %q: %w", name, u.Gid, err)
	}
	if id == 0 {
		return nil, fmt.Errorf("--user %s: that is root (UID 0); name an unprivileged user, or leave --user out to run steps as root", name)
	}
	su.UID, su.GID = uint32(id), uint32(gid)
	if gids, err := u.GroupIds(); err == nil {
		for _, g := range gids {
			if n, err := strconv.ParseUint(g, 10, 32); err == nil && uint32(n) != su.GID {
				su.Groups = append(su.Groups, uint32(n))
			}
		}
	}
	su.Groups = append([]uint32{su.GID}, su.Groups...)
	return su, nil
}

// stepDirs are the directories of a session that belong to the steps:
// HOME and, where the session has one, TMPDIR.
var stepDirs = []string{"home", "tmp"}

// openForUser makes the session's directories reachable by the step user
// (searchable, not readable, by others: the socket and agent files stay
// root's) and gives it the session's HOME and TMPDIR (stepDirs).
func openForUser(u *stepagent.StepUser, base, dir string) error {
	for _, d := range []string{base, dir} {
		if err := os.Chmod(d, 0o711); err != nil {
			return fmt.Errorf("let user %s reach its HOME: %w", u.Name, err)
		}
	}
	for _, name := range stepDirs {
		p := filepath.Join(dir, name)
		if _, err := os.Lstat(p); errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err := os.Lchown(p, int(u.UID), int(u.GID)); err != nil {
			return fmt.Errorf("give %s to user %s: %w", p, u.Name, err)
		}
	}
	return nil
}

// giveWorkspace hands the checkout at ws to the step user before the first
// step: every directory, symbolic link and file becomes the user's, but
// for regular files with more than one link (git objects hard-linked from
// the runner's mirror: read-only, readable by all, and never the user's to
// change, or the mirror would change with them). The directories above ws
// up to the runner's work directory work become searchable by others; a
// directory above that the user cannot search is an error naming it.
// Removing the workspace after the run is the runner's, as root: nothing
// the user leaves there (a 0000 directory, read-only files) can stop it.
func giveWorkspace(ctx context.Context, u *stepagent.StepUser, ws, work string) error {
	uid, gid := int(u.UID), int(u.GID)
	err := filepath.WalkDir(ws, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if d.Type().IsRegular() {
			fi, err := d.Info()
			if err != nil {
				return err
			}
			if st, ok := fi.Sys().(*syscall.Stat_t); ok && st.Nlink > 1 {
				return nil
			}
		}
		return os.Lchown(p, uid, gid)
	})
	if err != nil {
		return fmt.Errorf("give the workspace to user %s: %w", u.Name, err)
	}
	work = filepath.Clean(work)
	for d := filepath.Dir(ws); ; d = filepath.Dir(d) {
		fi, err := os.Stat(d)
		if err != nil {
			return err
		}
		inWork := d == work || (len(d) > len(work) && d[:len(work)+1] == work+string(filepath.Separator))
		if fi.Mode().Perm()&0o001 == 0 {
			if !inWork {
				return fmt.Errorf("user %s cannot reach the workspace: %s is not searchable by others (chmod o+x %s, or put --work elsewhere)", u.Name, d, d)
			}
			if err := os.Chmod(d, fi.Mode().Perm()|0o001); err != nil {
				return fmt.Errorf("let user %s reach the workspace: %w", u.Name, err)
			}
		}
		if d == filepath.Dir(d) {
			return nil
		}
	}
}
