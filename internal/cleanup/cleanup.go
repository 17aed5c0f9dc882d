// Package cleanup removes what runs leave on the runner's disk: workspaces
// and executor session directories. It must never leave a run's files
// behind because a step made them read-only, and it must never remove
// anything outside the directory it was given: it does not follow symbolic
// links and does not cross into another mount (a step that bind-mounted a
// host directory into its workspace and left it mounted — chroot and
// package builds do this by accident — must not have that directory's
// contents deleted).
package cleanup

import (
	"fmt"
	"strings"
)

// MountsLeftError is RemoveAll's error when it found mounts below the
// directory that it could not detach (not root, or the kernel refused): it
// removed everything else and left those mount points, and the directories
// above them, in place.
type MountsLeftError struct {
	Dir    string
	Mounts []string // mount points left, with the reason for each
}

func (e *MountsLeftError) Error() string {
	return fmt.Sprintf("%s not fully removed: it holds mounts that could not be detached (their contents were not touched): %s",
		e.Dir, strings.Join(e.Mounts, "; "))
}
