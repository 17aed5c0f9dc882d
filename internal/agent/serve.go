package agent

import (
	"flag"
	"regexp"
	"time"
)

// validID is the one rule for the IDs the protocol carries: a run's
// environment (Spec.ID, Hello's Run) and a step (Start.ID).
var validID = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$`)

// ValidID reports whether id is 1-63 of A-Z, a-z, 0-9, '.', '_' and '-',
// starting with a letter or digit: it fits a file name, a container name,
// a Kubernetes label value and (lower-cased) a pod name. IDRule says the
// same in words, for errors.
func ValidID(id string) bool { return validID.MatchString(id) }

// IDRule is ValidID's rule in words.
const IDRule = "1-63 letters, digits, '.', '_' or '-', starting with a letter or digit"

// Serve is the command line of `knotless-agent serve`, the step agent
// itself: an executor fills it and runs Args (as a process, a container's
// entry point or a pod's PID 1); cmd/knotless-agent parses it with
// Register. The flag names are written only in Register. Every zero value
// means "the agent's default", so a field left alone is not on the
// command line. Nothing in it is secret.
type Serve struct {
	// Dir is the agent's state directory (step scripts, output, exit
	// status). Required.
	Dir string
	// Socket is the Unix socket the agent listens on (mode 0600).
	// Required.
	Socket string
	// Workdir, Home and Tmp are the steps' working directory, HOME and
	// TMPDIR (Tmp empty: TMPDIR unset).
	Workdir, Home, Tmp string
	// PATH is the PATH of steps that set none and whose image has none
	// (empty: /usr/local/bin:/usr/bin:/bin).
	PATH string
	// PathAppend, when set, is a directory appended to the PATH of every
	// step that sets none (a kube job pod's builder puts buildctl there).
	PathAppend string
	// ImageEnv makes every step start from the agent's own environment:
	// in a container or pod, the image's ENV as the runtime gave it to
	// PID 1 (PATH among it). The step's own variables (the runner's and
	// the workflow's) win over it; HOME and TMPDIR stay the agent's.
	ImageEnv bool
	// Run is the environment's ID (executor.Spec.ID), which the agent
	// reports in its hello.
	Run string
	// Deadline, when set, is the run's end: a running step is stopped
	// (timeout) and none starts after it.
	Deadline time.Time
	// Linger is how long the agent stays after Deadline with no client
	// (0: 10 minutes).
	Linger time.Duration
	// Heartbeat and DeadAfter tune the connection (0: DefaultHeartbeat,
	// DefaultDeadAfter).
	Heartbeat, DeadAfter time.Duration
	// ExitWithParent ends the steps and the agent when the process that
	// started it is gone; ExitWithoutClient (> 0) when no client has been
	// connected that long. Both say nobody will take the run over.
	ExitWithParent    bool
	ExitWithoutClient time.Duration
	// NoCgroups keeps steps out of cgroups even where cgroup v2 is
	// delegated.
	NoCgroups bool
	// User is NAME:UID:GID[:GROUP,...], the unprivileged user every step
	// runs as (the agent runs as root); empty: the agent's own user.
	User string
	// Program, when set, is the path of the agent's own program that exec
	// bridges run (`knotless-agent connect`): the agent restores it there
	// when a step removes or changes it, as it listens on Socket again
	// when a step removes the socket.
	Program string
	// ReadyFD (> 0) is a file descriptor the agent writes "ready\n" to
	// once it listens.
	ReadyFD int
	// LogLevel is debug, info, warn or error (empty: info).
	LogLevel string
	// Nproc (> 0) is every step's process limit, RLIMIT_NPROC
	// (setrlimit(2)): the processes and threads of the steps' user, the
	// agent's own among them. The agent applies it only in a user
	// namespace of its own (UIDMapRemapped), where the kernel counts them
	// for this namespace's uids alone; in the node's, the uid's count is
	// every process of that uid on the node, other pods' included.
	Nproc int
}

// Register defines the flags of `knotless-agent serve` on fs, bound to
// s's fields. Every default is the field's zero value.
func (s *Serve) Register(fs *flag.FlagSet) {
	fs.StringVar(&s.Dir, "dir", "", "state directory: step scripts, output and exit status (required)")
	fs.StringVar(&s.Socket, "socket", "", "Unix socket to listen on, mode 0600 (required)")
	fs.StringVar(&s.Workdir, "workdir", "", "the steps' working directory (the checkout)")
	fs.StringVar(&s.Home, "home", "", "HOME for steps that set none")
	fs.StringVar(&s.Tmp, "tmp", "", "TMPDIR for steps that set none: the run's temporary directory (unset when empty)")
	fs.StringVar(&s.PATH, "path", "", "PATH for steps that set none and whose image has none (default /usr/local/bin:/usr/bin:/bin)")
	fs.StringVar(&s.PathAppend, "path-append", "", "a directory appended to the PATH of every step that sets none")
	fs.BoolVar(&s.ImageEnv, "image-env", false, "steps start from this process's environment (the image's, in a container), beneath their own variables; HOME and TMPDIR stay the agent's")
	fs.StringVar(&s.Run, "run", "", "the run environment's ID, reported to clients")
	fs.Var((*timeFlag)(&s.Deadline), "deadline", "RFC 3339 time after which a running step is stopped (timeout) and no step starts")
	fs.DurationVar(&s.Linger, "linger", 0, "how long to stay after the deadline with no client before exiting (default 10m)")
	fs.DurationVar(&s.Heartbeat, "heartbeat", 0, "heartbeat interval (default 5s)")
	fs.DurationVar(&s.DeadAfter, "dead-after", 0, "a connection silent this long is dropped (default 20s)")
	fs.BoolVar(&s.ExitWithParent, "exit-with-parent", false, "end the steps and exit (removing --dir) when the process that started the agent is gone: nobody takes the run over")
	fs.DurationVar(&s.ExitWithoutClient, "exit-without-client", 0, "end the steps and exit once no client has been connected this long (0: never): nobody takes the run over")
	fs.BoolVar(&s.NoCgroups, "no-cgroups", false, "do not give steps cgroups even where cgroup v2 is delegated (rely on the child subreaper alone)")
	fs.StringVar(&s.User, "user", "", "NAME:UID:GID[:GROUP,...]: run every step as this unprivileged user (the agent runs as root)")
	fs.StringVar(&s.Program, "program", "", "the agent's program as exec bridges run it: restored there when a step removes or changes it")
	fs.IntVar(&s.ReadyFD, "ready-fd", 0, "file descriptor to write \"ready\\n\" to (then close) once listening")
	fs.StringVar(&s.LogLevel, "log-level", "", "debug, info, warn or error (default info)")
	fs.IntVar(&s.Nproc, "nproc", 0, "every step's process limit (RLIMIT_NPROC: processes and threads of the steps' user), applied only in a user namespace of the agent's own (0: none)")
}

// Args is the agent's argv after the program: "serve" and one
// --name=value for every field that is not its zero value, in the flags'
// lexical order.
func (s Serve) Args() []string {
	var v Serve
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	v.Register(fs) // the defaults, bound to v's fields ...
	v = s          // ... which now hold s's values
	return nonDefault("serve", fs)
}

// nonDefault is cmd followed by --name=value for each flag of fs whose
// value is not its default.
func nonDefault(cmd string, fs *flag.FlagSet) []string {
	args := []string{cmd}
	fs.VisitAll(func(f *flag.Flag) {
		if val := f.Value.String(); val != f.DefValue {
			args = append(args, "--"+f.Name+"="+val)
		}
	})
	return args
}

// Connect is the command line of `knotless-agent connect`, which bridges
// its STDIN and STDOUT to the agent listening at Socket: an exec's stream
// (kube, docker) becomes a client connection. As with Serve, the flag
// names are written only in Register.
type Connect struct {
	// Socket is the agent's Unix socket. Required.
	Socket string
	// Wait is how long to keep trying while nothing listens yet (an agent
	// starting); 0: fail at once.
	Wait time.Duration
	// Wake, when set, is a named pipe written to while waiting, for a
	// process that starts the agent once woken (the kube executor's PID 1).
	Wake string
}

// Register defines the flags of `knotless-agent connect` on fs.
func (c *Connect) Register(fs *flag.FlagSet) {
	fs.StringVar(&c.Socket, "socket", "", "the agent's Unix socket (required)")
	fs.DurationVar(&c.Wait, "wait", 0, "keep trying this long while nothing listens on the socket yet (an agent starting)")
	fs.StringVar(&c.Wake, "wake", "", "named pipe to write a line to while waiting, for a process that starts the agent once woken")
}

// Args is the argv after the program: "connect" and the fields that are
// not zero.
func (c Connect) Args() []string {
	var v Connect
	fs := flag.NewFlagSet("connect", flag.ContinueOnError)
	v.Register(fs)
	v = c
	return nonDefault("connect", fs)
}

// timeFlag is a time.Time flag in RFC 3339 with nanoseconds (UTC); the
// zero time prints as "".
type timeFlag time.Time

func (t *timeFlag) String() string {
	if t == nil || time.Time(*t).IsZero() {
		return ""
	}
	return time.Time(*t).UTC().Format(time.RFC3339Nano)
}

func (t *timeFlag) Set(s string) error {
	if s == "" {
		*t = timeFlag{}
		return nil
	}
	v, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return err
	}
	*t = timeFlag(v)
	return nil
}
