package units

import (
	"strings"
	"testing"
	"time"
)

func TestParseSize(t *testing.T) {
	good := map[string]int64{
		"1000": 1000, "4Gi": 4 << 30, "512Mi": 512 << 20, "10G": 10e9, "1k": 1000, "1Ki": 1024,
		"0.5Gi": 1 << 29, "1.5k": 1500, "1e3": 1000, "2E": 2e18, "+7": 7, "1Ei": 1 << 60,
	}
	for s, want := range good {
		if got, err := ParseSize(s); err != nil || got != want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", s, got, err, want)
		}
	}
	for _, s := range []string{"", "0", "-1", "1.5", "10K", "4GB", "10MiB", "Gi", "8Ei", "1e999", "0.1", "1m", "1 Gi", "1e"} {
		if got, err := ParseSize(s); err == nil {
			t.Errorf("ParseSize(%q) = %d, want an error", s, got)
		}
	}
}

// The errors quote the input and say what to write instead: they are
// shown as they are to whoever wrote the workflow or the flag.
func TestParseSize_ErrorsQuoteTheInputAndSayWhatIsExpected(t *testing.T) {
	for s, want := range map[string]string{
		"4GB":   `unknown size suffix "GB" in "4GB"; use Ki, Mi, Gi, Ti (1024-based) or k, M, G, T (1000-based)`,
		"0":     `size "0" must be greater than zero`,
		"1.5":   `size "1.5" is not a whole number of bytes`,
		"8Ei":   `size "8Ei" is too large`,
		"-1":    `invalid quantity "-1": negative; expected a number with an optional unit, like 4Gi, 512Mi, 10G or 1000`,
		"1e999": `invalid quantity "1e999": exponent too large`,
	} {
		_, err := ParseSize(s)
		if err == nil || !strings.HasPrefix(err.Error(), want) {
			t.Errorf("ParseSize(%q) error = %v; want it to start with %q", s, err, want)
		}
	}
}

// FormatSize's promise: ParseSize reads back what it writes, with the
// largest binary suffix that divides the size.
func TestFormatSize_IsReadBackByParseSize(t *testing.T) {
	for n, want := range map[int64]string{
		1: "1", 1000: "1000", 1024: "1Ki", 1536 << 20: "1536Mi", 2 << 30: "2Gi", 3 << 40: "3Ti",
		1<<50 + 1<<40: "1025Ti", 1000000: "1000000", 1<<63 - 1: "9223372036854775807",
	} {
		got := FormatSize(n)
		if got != want {
			t.Errorf("FormatSize(%d) = %q, want %q", n, got, want)
		}
		if back, err := ParseSize(got); err != nil || back != n {
			t.Errorf("ParseSize(FormatSize(%d) = %q) = %d, %v", n, got, back, err)
		}
	}
}

func TestParseCPUs(t *testing.T) {
	good := map[string]int64{"2": 2000, "0.5": 500, "500m": 500, "1.25": 1250, "1m": 1}
	for s, want := range good {
		if got, err := ParseCPUs(s); err != nil || got != want {
			t.Errorf("ParseCPUs(%q) = %d, %v; want %d", s, got, err, want)
		}
	}
	for _, s := range []string{"", "0", "-1", "0.0001", "2 cores", "1Gi", "0.5m", "1k", "1000001"} {
		if got, err := ParseCPUs(s); err == nil {
			t.Errorf("ParseCPUs(%q) = %d, want an error", s, got)
		}
	}
}

func TestFormatDuration_LeavesOutZeroTails(t *testing.T) {
	for d, want := range map[time.Duration]string{
		5 * time.Minute: "5m", time.Hour: "1h", 90 * time.Minute: "1h30m", 90 * time.Second: "1m30s",
		24 * time.Hour: "24h", 30 * time.Second: "30s",
	} {
		if got := FormatDuration(d); got != want {
			t.Errorf("FormatDuration(%s) = %q, want %q", d, got, want)
		}
	}
}
