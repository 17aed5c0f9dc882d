package main

import (
	"fmt"
	"strconv"
	"strings"
)

// byteSize is a flag holding a number of bytes, written as a count with an
// optional unit: 1048576, 512KiB, 10MiB, 1GiB, 2TiB (K, M, G, T and KB,
// MB, GB, TB are read as the binary units too).
type byteSize struct{ p *int64 }

var byteUnits = []struct {
	suffixes []string
	shift    uint
}{
	{[]string{"TIB", "TB", "T"}, 40},
	{[]string{"GIB", "GB", "G"}, 30},
	{[]string{"MIB", "MB", "M"}, 20},
	{[]string{"KIB", "KB", "K"}, 10},
	{[]string{"B"}, 0},
}

func (b byteSize) String() string {
	if b.p == nil {
		return "0"
	}
	n := *b.p
	for _, u := range byteUnits {
		if unit := int64(1) << u.shift; u.shift > 0 && n != 0 && n%unit == 0 {
			return strconv.FormatInt(n/unit, 10) + strings.Replace(u.suffixes[0], "I", "i", 1)
		}
	}
	return strconv.FormatInt(n, 10)
}

func (b byteSize) Set(s string) error {
	t := strings.ToUpper(strings.TrimSpace(s))
	shift := uint(0)
units:
	for _, u := range byteUnits {
		for _, suf := range u.suffixes {
			if strings.HasSuffix(t, suf) {
				t, shift = strings.TrimSpace(strings.TrimSuffix(t, suf)), u.shift
				break units
			}
		}
	}
	n, err := strconv.ParseInt(t, 10, 64)
	if err != nil || n < 0 || n > (1<<62)>>shift {
		return fmt.Errorf("want a size in bytes like 1048576, 512KiB, 10MiB or 1GiB, not %q", s)
	}
	*b.p = n << shift
	return nil
}

func (byteSize) Type() string { return "size" }
