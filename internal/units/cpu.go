package units

import (
	"fmt"
	"math/big"
)

// ParseCPUs checks a CPU amount in Kubernetes quantity syntax ("2", "0.5",
// "500m") and returns it in millicores. It must be at least 1m and at most
// a million CPUs, and is refused if it is not a whole number of
// millicores.
func ParseCPUs(s string) (int64, error) {
	q, suffix, err := parseQuantity(s)
	if err != nil {
		return 0, err
	}
	switch suffix {
	case "":
		q.Mul(q, big.NewRat(1000, 1))
	case "m":
	default:
		return 0, fmt.Errorf("unknown CPU suffix %q in %q; write whole or fractional CPUs (\"2\", \"0.5\") or millicores (\"500m\")", suffix, s)
	}
	if q.Sign() <= 0 {
		return 0, fmt.Errorf("cpus %q must be greater than zero", s)
	}
	if !q.IsInt() {
		return 0, fmt.Errorf("cpus %q is finer than one millicore (1m = 0.001)", s)
	}
	n := q.Num()
	if !n.IsInt64() || n.Int64() > 1_000_000_000 {
		return 0, fmt.Errorf("cpus %q is too large", s)
	}
	return n.Int64(), nil
}
