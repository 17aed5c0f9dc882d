// Command install builds the tests' S3 server (versitygw at
// s3test.Version) into s3test.ToolsDir unless it is there, and prints its
// path: `make s3-server`, which .ci/run runs beside the other builds.
package main

import (
	"fmt"
	"os"

	"knotless.dev/knotless/internal/objstore/s3test"
)

func main() {
	bin, err := s3test.Install()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println(bin)
}
