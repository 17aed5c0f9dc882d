package stepagent

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// StepUser is the unprivileged user an agent started as root runs every
// step as (knotless-run --user): the step's processes get its UID, GID
// and supplementary groups (setuid/setgid/setgroups at the fork, so no
// step process ever runs as root), and USER and LOGNAME name it.
type StepUser struct {
	Name   string
	UID    uint32
	GID    uint32
	Groups []uint32
}

// ParseStepUser reads the agent's --user value NAME:UID:GID[:G1,G2,...].
func ParseStepUser(s string) (*StepUser, error) {
	f := strings.Split(s, ":")
	if len(f) < 3 || len(f) > 4 || f[0] == "" {
		return nil, fmt.Errorf("--user %q: want NAME:UID:GID[:GROUP,...]", s)
	}
	num := func(v string) (uint32, error) {
		n, err := strconv.ParseUint(v, 10, 32)
		if err != nil {
			return 0, fmt.Errorf("--user %q: %q is not a number", s, v)
		}
		return uint32(n), nil
	}
	u := &StepUser{Name: f[0]}
	var err error
	if u.UID, err = num(f[1]); err != nil {
		return nil, err
	}
	if u.GID, err = num(f[2]); err != nil {
		return nil, err
	}
	if u.UID == 0 {
		return nil, fmt.Errorf("--user %q: steps must run as an unprivileged user, not UID 0", s)
	}
	if len(f) == 4 && f[3] != "" {
		for _, g := range strings.Split(f[3], ",") {
			n, err := num(g)
			if err != nil {
				return nil, err
			}
			u.Groups = append(u.Groups, n)
		}
	}
	return u, nil
}

// String is the --user form of u.
func (u *StepUser) String() string {
	gs := make([]string, len(u.Groups))
	for i, g := range u.Groups {
		gs[i] = strconv.FormatUint(uint64(g), 10)
	}
	return fmt.Sprintf("%s:%d:%d:%s", u.Name, u.UID, u.GID, strings.Join(gs, ","))
}

// credential is what the fork of a step's shell switches to; nil when
// steps run as the agent's own user.
func (u *StepUser) credential() *syscall.Credential {
	if u == nil {
		return nil
	}
	return &syscall.Credential{Uid: u.UID, Gid: u.GID, Groups: append([]uint32(nil), u.Groups...)}
}

// giveScript lets the step's user read its script: the script becomes the
// user's, and the directories above it up to the agent's directory
// searchable (not readable) by others. Nothing else of the agent's
// directory (its socket, other steps' output) opens up.
func (a *Agent) giveScript(script string) error {
	u := a.cfg.User
	if u == nil {
		return nil
	}
	if err := os.Chown(script, int(u.UID), int(u.GID)); err != nil {
		return fmt.Errorf("give the script to user %s: %w", u.Name, err)
	}
	for d := filepath.Dir(script); ; d = filepath.Dir(d) {
		fi, err := os.Stat(d)
		if err != nil {
			return err
		}
		if fi.Mode().Perm()&0o001 == 0 {
			if err := os.Chmod(d, fi.Mode().Perm()|0o011); err != nil {
				return fmt.Errorf("let user %s reach the script: %w", u.Name, err)
			}
		}
		if d == filepath.Clean(a.cfg.Dir) || d == filepath.Dir(d) {
			return nil
		}
	}
}
