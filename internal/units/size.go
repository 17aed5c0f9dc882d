package units

import (
	"fmt"
	"math/big"
	"strconv"
)

// ParseSize parses a size in Kubernetes quantity syntax into bytes:
// a decimal number ("1000", "1.5", "2e3") with an optional suffix, binary
// (Ki, Mi, Gi, Ti, Pi, Ei: powers of 1024) or decimal (k, M, G, T, P, E:
// powers of 1000). The result must be a whole number of bytes, greater
// than zero and at most MaxInt64. Errors say what was expected.
func ParseSize(s string) (int64, error) {
	q, suffix, err := parseQuantity(s)
	if err != nil {
		return 0, err
	}
	mult, ok := sizeSuffixes[suffix]
	if !ok {
		return 0, fmt.Errorf("unknown size suffix %q in %q; use Ki, Mi, Gi, Ti (1024-based) or k, M, G, T (1000-based)", suffix, s)
	}
	q.Mul(q, new(big.Rat).SetInt(mult))
	if q.Sign() <= 0 {
		return 0, fmt.Errorf("size %q must be greater than zero", s)
	}
	if !q.IsInt() {
		return 0, fmt.Errorf("size %q is not a whole number of bytes", s)
	}
	n := q.Num()
	if !n.IsInt64() {
		return 0, fmt.Errorf("size %q is too large", s)
	}
	return n.Int64(), nil
}

var sizeSuffixes = func() map[string]*big.Int {
	m := map[string]*big.Int{"": big.NewInt(1)}
	for i, s := range []string{"Ki", "Mi", "Gi", "Ti", "Pi", "Ei"} {
		m[s] = new(big.Int).Lsh(big.NewInt(1), uint(10*(i+1)))
	}
	for i, s := range []string{"k", "M", "G", "T", "P", "E"} {
		m[s] = new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(3*(i+1))), nil)
	}
	return m
}()

// FormatSize writes a byte count as ParseSize reads it back: with the
// largest 1024-based suffix (Ki, Mi, Gi, Ti) that divides it exactly,
// else in plain bytes ("2Gi", "1536Mi", "1000000").
func FormatSize(n int64) string {
	for _, u := range []struct {
		suffix string
		size   int64
	}{{"Ti", 1 << 40}, {"Gi", 1 << 30}, {"Mi", 1 << 20}, {"Ki", 1 << 10}} {
		if n != 0 && n%u.size == 0 {
			return strconv.FormatInt(n/u.size, 10) + u.suffix
		}
	}
	return strconv.FormatInt(n, 10)
}
