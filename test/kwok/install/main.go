// Command install builds kwok (kwok.Version's cmd/kwok) into
// kwok.ToolsDir unless it is there, and prints its path: `make kwok`,
// which .ci/run runs beside the other builds so that the scale
// benchmark's tiny version (bench-smoke, `make test`) finds it built.
package main

import (
	"fmt"
	"os"

	"knotless.dev/knotless/test/kwok"
)

func main() {
	bin, err := kwok.Install()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println(bin)
}
