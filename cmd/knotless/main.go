// Command knotless is the user's client of a Knotless CI server; see
// internal/cli, which holds all of it.
package main

import (
	"os"
	_ "time/tzdata" // IANA zones of on.schedule (workflow lint) on hosts without zoneinfo

	"knotless.dev/knotless/internal/cli"
)

func main() {
	os.Exit(cli.Main(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}
