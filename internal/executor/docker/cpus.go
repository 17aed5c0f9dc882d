package docker

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// ParseCPUs reads a CPU count as docker's --cpus ("2", "0.5") or as a
// Kubernetes quantity ("500m", the kube executor's spelling, so that one
// workflow's resources.cpus means the same on both) and returns it in
// nano-CPUs (HostConfig.NanoCPUs). Errors: not a positive number.
func ParseCPUs(s string) (int64, error) {
	milli := strings.HasSuffix(s, "m")
	f, err := strconv.ParseFloat(strings.TrimSuffix(s, "m"), 64)
	if err != nil || f <= 0 {
		return 0, errors.New("want a positive count of CPUs such as 2, 0.5 or 500m")
	}
	if milli {
		f /= 1000
	}
	n := int64(f * 1e9)
	if n < 1e7 {
		return 0, fmt.Errorf("%s is less than 0.01 CPUs", s)
	}
	return n, nil
}

func cpusString(nano int64) string {
	return strconv.FormatFloat(float64(nano)/1e9, 'f', -1, 64)
}
