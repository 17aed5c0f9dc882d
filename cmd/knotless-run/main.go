// Command knotless-run is the Knotless runner; see internal/runnercli, which
// holds all of it.
package main

import (
	"os"
	_ "time/tzdata" // IANA zones of on.schedule (the runner parses workflows) on hosts without zoneinfo

	"knotless.dev/knotless/internal/runnercli"
)

func main() {
	os.Exit(runnercli.Main(os.Args[1:], os.Stdout, os.Stderr))
}
