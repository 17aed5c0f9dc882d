package stepagent

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"knotless.dev/knotless/internal/agent"
)

// LimitCommand is the agent's subcommand that a step starts through when
// it has a process limit (Config.Nproc):
//
//	knotless-agent limit NPROC PATH ARGV0 ARG...
//
// sets RLIMIT_NPROC to NPROC (soft and hard) and execs PATH with argv
// ARGV0 ARG... and its own environment. Go cannot set a limit between a
// child's fork and its exec, and the agent cannot lower its own: a fork
// bomb at the limit would then stop the agent's runtime from making the
// threads it needs. This process makes its threads before it lowers the
// limit, and exec makes none.
const LimitCommand = "limit"

// ExecLimited is `knotless-agent limit`'s body, args being what follows
// the subcommand. It returns only when it cannot become the program: an
// exit status, with the reason on STDERR (which is the step's output).
func ExecLimited(args []string) int {
	if len(args) < 3 {
		fmt.Fprintln(os.Stderr, "knotless-agent limit: usage: knotless-agent limit NPROC PATH ARGV0 [ARG...]")
		return 2
	}
	n, err := strconv.ParseUint(args[0], 10, 64)
	if err != nil || n == 0 {
		fmt.Fprintf(os.Stderr, "knotless-agent limit: NPROC %q: want a positive number\n", args[0])
		return 2
	}
	if err := unix.Setrlimit(unix.RLIMIT_NPROC, &unix.Rlimit{Cur: n, Max: n}); err != nil {
		fmt.Fprintf(os.Stderr, "knotless-agent limit: setrlimit RLIMIT_NPROC %d: %v\n", n, err)
		return 126
	}
	err = syscall.Exec(args[1], args[2:], os.Environ())
	fmt.Fprintf(os.Stderr, "knotless-agent limit: exec %s: %v\n", args[1], err)
	return 127
}

// limitedArgv returns the path and argv that start path with argv under
// limit nproc through LimitCommand: the agent's own program by
// /proc/self/exe, which the kernel resolves to the running program even
// when a step has removed or replaced its file.
func limitedArgv(nproc int, path string, argv []string) (string, []string) {
	return "/proc/self/exe", append([]string{"knotless-agent", LimitCommand, strconv.Itoa(nproc), path}, argv...)
}

// ownUserNamespace reads this process's /proc/self/uid_map and says
// whether it is a user namespace of its own (agent.UIDMapRemapped): the
// map's text (empty when unreadable) and the verdict.
func ownUserNamespace() (string, bool) {
	b, err := os.ReadFile("/proc/self/uid_map")
	if err != nil {
		return "", false
	}
	text := strings.TrimSpace(string(b))
	return text, agent.UIDMapRemapped(text)
}
