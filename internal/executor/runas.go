package executor

import (
	"fmt"
	"strconv"
	"strings"
)

// RunAs is the numeric user a job's container runs as (the docker and kube
// executors' --run-as).
type RunAs struct {
	// Image keeps the image's own user, which must then be numeric and not
	// root (kube: runAsUser unset, runAsNonRoot still refuses root).
	Image bool
	// UID and GID are used when Image is false.
	UID, GID int64
}

// Group is the GID a job runs with: GID, or UID where GID is 0 (a RunAs
// not made by ParseRunAs); -1 for Image (the image's own group).
func (r RunAs) Group() int64 {
	switch {
	case r.Image:
		return -1
	case r.GID == 0:
		return r.UID
	}
	return r.GID
}

// DefaultRunAs is UID:GID 1000:1000.
var DefaultRunAs = RunAs{UID: 1000, GID: 1000}

// ParseRunAs reads "UID:GID", "UID" (the GID is then the UID) or "image".
// It returns an error naming the flag for anything else, and for UID 0:
// job containers never run as root.
func ParseRunAs(s string) (RunAs, error) {
	if s == "image" {
		return RunAs{Image: true}, nil
	}
	u, g, hasG := strings.Cut(s, ":")
	uid, err := strconv.ParseInt(u, 10, 64)
	if err != nil || uid < 0 {
		return RunAs{}, fmt.Errorf("--run-as %q: want UID:GID (numbers), UID, or image", s)
	}
	gid := uid
	if hasG {
		if gid, err = strconv.ParseInt(g, 10, 64); err != nil || gid < 0 {
			return RunAs{}, fmt.Errorf("--run-as %q: the GID is not a number", s)
		}
	}
	if uid == 0 {
		return RunAs{}, fmt.Errorf("--run-as %q: job containers never run as root (UID 0)", s)
	}
	return RunAs{UID: uid, GID: gid}, nil
}

// String is the flag's spelling.
func (r RunAs) String() string {
	if r.Image {
		return "image"
	}
	return fmt.Sprintf("%d:%d", r.UID, r.GID)
}
