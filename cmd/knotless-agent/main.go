// Command knotless-agent is the step agent: the small static program that
// owns one run's environment (see internal/stepagent) and speaks the agent
// protocol (internal/agent) with the runner.
//
//	knotless-agent serve --dir DIR --socket PATH [...]   the agent itself
//	knotless-agent connect --socket PATH                 bridge STDIN/STDOUT to it (kube, docker exec)
//	knotless-agent probe dns:NAME tcp:HOST:PORT ...      network checks for knotless-run doctor
//	knotless-agent version
//
// It uses the standard library and klauspost/compress's zstd (copy
// streams of caches) only, so that it stays small; runners start it,
// people do not.
package main

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	"knotless.dev/knotless/internal/agent"
	"knotless.dev/knotless/internal/stepagent"
	"knotless.dev/knotless/internal/version"
)

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	switch os.Args[1] {
	case "serve":
		os.Exit(serve(os.Args[2:]))
	case "connect":
		os.Exit(connect(os.Args[2:]))
	case "probe":
		os.Exit(probe(os.Args[2:]))
	case stepagent.LimitCommand:
		os.Exit(stepagent.ExecLimited(os.Args[2:]))
	case "version", "--version":
		fmt.Println("knotless-agent", version.Version)
	case "-h", "--help", "help":
		usage()
	default:
		fmt.Fprintf(os.Stderr, "knotless-agent: unknown command %q\n", os.Args[1])
		usage()
	}
}

func usage() {
	fmt.Fprint(os.Stderr, `knotless-agent is Knotless's step agent; runners start it, people do not.

  knotless-agent serve --dir DIR --socket PATH [flags]   run the agent for one run
  knotless-agent connect --socket PATH [--wait DUR]     bridge STDIN/STDOUT to a running agent
  knotless-agent probe [--timeout 3s] [--connected] dns:NAME tcp:HOST:PORT ...
                                                       network checks (knotless-run doctor,
                                                       and services' ports with --connected)
  knotless-agent limit NPROC PATH ARGV0 [ARG...]       how the agent starts a step under --nproc
  knotless-agent version

Run "knotless-agent serve -h" for the serve flags.
`)
	os.Exit(2)
}

func serve(args []string) int {
	fs := flag.NewFlagSet("serve", flag.ExitOnError)
	var sv agent.Serve
	sv.Register(fs)
	_ = fs.Parse(args)
	var lvl slog.Level
	_ = lvl.UnmarshalText([]byte(cmp.Or(sv.LogLevel, "info")))
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: lvl}))
	if sv.Dir == "" || sv.Socket == "" {
		fmt.Fprintln(os.Stderr, "knotless-agent serve: --dir and --socket are required")
		return 2
	}
	cfg := stepagent.Config{
		Dir: sv.Dir, Workdir: sv.Workdir, Home: sv.Home, PATH: sv.PATH, Tmp: sv.Tmp, Run: sv.Run,
		Deadline: sv.Deadline, Linger: sv.Linger, Heartbeat: sv.Heartbeat, DeadAfter: sv.DeadAfter,
		ExitWithParent: sv.ExitWithParent, ExitWithoutClient: sv.ExitWithoutClient, NoCgroups: sv.NoCgroups,
		Nproc: sv.Nproc, PathAppend: sv.PathAppend,
	}
	if sv.ImageEnv {
		cfg.Base = stepagent.ImageBase(os.Environ())
	}
	socket, readyFD := sv.Socket, sv.ReadyFD
	if sv.User != "" {
		u, err := stepagent.ParseStepUser(sv.User)
		if err != nil {
			fmt.Fprintf(os.Stderr, "knotless-agent serve: %v\n", err)
			return 2
		}
		cfg.User = u
	}
	cfg.Version, cfg.Logger = version.Version, log
	a, err := stepagent.New(cfg)
	if err != nil {
		log.Error("cannot start", "err", err)
		return 1
	}
	l, err := agent.ListenUnix(socket) // replaces a stale socket of an earlier agent
	if err != nil {
		log.Error("cannot listen", "socket", socket, "err", err)
		return 1
	}
	if err := a.WriteState(map[string]any{"socket": socket}); err != nil {
		log.Warn("cannot record the agent's state", "err", err)
	}
	if readyFD > 0 {
		f := os.NewFile(uintptr(readyFD), "ready")
		_, _ = f.WriteString("ready\n")
		_ = f.Close()
	}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	// No signal.Ignore here: an ignored signal stays ignored in every step
	// (exec keeps SIG_IGN), and `yes | head` needs SIGPIPE.
	go func() {
		sig := <-sigs
		log.Info("signal received: stopping the running step and exiting", "signal", sig.String())
		a.Shutdown()
	}()
	// In a container (the image's environment) steps run as the agent's
	// own user: keep the socket and the program the bridge needs where
	// the runner looks for them.
	if sv.ImageEnv || sv.Program != "" {
		go a.Guard(socket, sv.Program)
	}
	if err := a.Serve(l); err != nil {
		log.Error("serving failed", "err", err)
		return 1
	}
	_ = os.Remove(socket)
	log.Info("agent exiting")
	return 0
}

// connect bridges STDIN/STDOUT to the agent's socket: the byte stream an
// exec carries becomes a client connection.
func connect(args []string) int {
	fs := flag.NewFlagSet("connect", flag.ExitOnError)
	var cf agent.Connect
	cf.Register(fs)
	_ = fs.Parse(args)
	if cf.Socket == "" {
		fmt.Fprintln(os.Stderr, "knotless-agent connect: --socket is required")
		return 2
	}
	socket, wait, wake := &cf.Socket, &cf.Wait, &cf.Wake
	deadline := time.Now().Add(*wait)
	c, err := agent.DialUnix(context.Background(), *socket)
	for err != nil && time.Now().Before(deadline) {
		if *wake != "" {
			wakeUp(*wake)
		}
		time.Sleep(2 * time.Millisecond)
		c, err = agent.DialUnix(context.Background(), *socket)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "knotless-agent connect: %v\n", err)
		return 1
	}
	done := make(chan struct{}, 2)
	go func() {
		_, _ = io.Copy(c, os.Stdin)
		if uc, ok := c.(*net.UnixConn); ok {
			_ = uc.CloseWrite()
		}
		done <- struct{}{}
	}()
	go func() {
		_, _ = io.Copy(os.Stdout, c)
		done <- struct{}{}
	}()
	<-done
	return 0
}

// wakeUp writes a line to the named pipe fifo if a reader has it open
// (non-blocking: without a reader the open fails and nothing is lost).
func wakeUp(fifo string) {
	f, err := os.OpenFile(fifo, os.O_WRONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return
	}
	_, _ = f.WriteString("go\n")
	_ = f.Close()
}
