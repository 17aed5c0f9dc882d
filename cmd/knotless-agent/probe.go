package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"strings"
	"syscall"
	"time"
)

// probe tries each target from inside the job environment and prints one
// line per target, for `knotless-run doctor` (so that the check needs no
// tool in the job image):
//
//	dns NAME ok ADDR...      | dns NAME fail ERROR
//	tcp HOST:PORT reachable   (connected, or refused: something answered)
//	tcp HOST:PORT blocked WHY (a timeout, no route: dropped on the way)
//	tcp HOST:PORT unresolved ERROR
//
// Targets are dns:NAME and tcp:HOST:PORT. It exits 0 whatever it found,
// 2 on a bad target; with --connected, 1 unless every tcp target
// connected (a service's readiness by its ports).
func probe(args []string) int {
	fs := flag.NewFlagSet("probe", flag.ExitOnError)
	timeout := fs.Duration("timeout", 3*time.Second, "how long each target may take")
	connected := fs.Bool("connected", false, "exit 1 unless every tcp target connected")
	_ = fs.Parse(args)
	code := 0
	for _, t := range fs.Args() {
		kind, target, _ := strings.Cut(t, ":")
		ctx, cancel := context.WithTimeout(context.Background(), *timeout)
		switch kind {
		case "dns":
			addrs, err := net.DefaultResolver.LookupHost(ctx, target)
			if err != nil {
				fmt.Printf("dns %s fail %v\n", target, err)
			} else {
				fmt.Printf("dns %s ok %s\n", target, strings.Join(addrs, " "))
			}
		case "tcp":
			var d net.Dialer
			c, err := d.DialContext(ctx, "tcp", target)
			if err != nil && *connected {
				code = 1
			}
			switch {
			case err == nil:
				c.Close()
				fmt.Printf("tcp %s reachable connected\n", target)
			case errors.As(err, new(*net.DNSError)):
				fmt.Printf("tcp %s unresolved %v\n", target, err)
			case errors.Is(err, syscall.ECONNREFUSED):
				fmt.Printf("tcp %s reachable refused\n", target)
			default:
				fmt.Printf("tcp %s blocked %v\n", target, err)
			}
		default:
			cancel()
			fmt.Fprintf(os.Stderr, "knotless-agent probe: target %q: want dns:NAME or tcp:HOST:PORT\n", t)
			return 2
		}
		cancel()
	}
	return code
}
