package envflag

import (
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

// TestSize_TenMIsTheSameOnServerAndRunner pins one meaning of a size on
// every program: 10M is 10,000,000 bytes and 10Mi 10,485,760, as in a
// workflow's resources: (the server once read 10M as 10Mi while the
// runner read it as 10,000,000).
func TestSize_TenMIsTheSameOnServerAndRunner(t *testing.T) {
	for in, want := range map[string]int64{"10M": 10_000_000, "10Mi": 10 << 20, "10MiB": 10 << 20, "1048576": 1 << 20,
		"512Ki": 512 << 10, "1Gi": 1 << 30, "1G": 1_000_000_000, "0": 0} {
		var n int64
		if err := (Size{P: &n, AllowZero: true}).Set(in); err != nil || n != want {
			t.Errorf("Set(%q) = %d, %v; want %d", in, n, err, want)
		}
	}
	for _, in := range []string{"", "-1", "ten", "1.5Gix", "10MB"} {
		var n int64
		if err := (Size{P: &n, AllowZero: true}).Set(in); err == nil {
			t.Errorf("Set(%q) = %d, want an error", in, n)
		}
	}
	var n int64
	if err := (Size{P: &n}).Set("0"); err == nil {
		t.Errorf("Set(0) without AllowZero: no error")
	}
	n = 10 << 20
	if s := (Size{P: &n}).String(); s != "10Mi" {
		t.Errorf("String() = %q, want 10Mi", s)
	}
}

// TestApply_CommandLineWinsAndOnlyBoundFlagsReadTheEnvironment.
func TestApply_CommandLineWinsAndOnlyBoundFlagsReadTheEnvironment(t *testing.T) {
	fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
	a := fs.String("alpha-one", "a", "first")
	b := fs.String("beta", "b", "second")
	c := fs.String("gamma", "g", "not bound")
	Bind(fs, "alpha-one", "beta")
	if u := fs.Lookup("alpha-one").Usage; !strings.HasSuffix(u, "[env KNOTLESS_ALPHA_ONE]") {
		t.Errorf("usage %q", u)
	}
	t.Setenv("KNOTLESS_ALPHA_ONE", "from-env")
	t.Setenv("KNOTLESS_BETA", "from-env")
	t.Setenv("KNOTLESS_GAMMA", "from-env")
	if err := fs.Parse([]string{"--beta", "from-flag"}); err != nil {
		t.Fatal(err)
	}
	if err := Apply(fs); err != nil {
		t.Fatal(err)
	}
	if *a != "from-env" || *b != "from-flag" || *c != "g" {
		t.Errorf("alpha %q beta %q gamma %q", *a, *b, *c)
	}
	d := fs.Duration("wait", 0, "")
	BindAs(fs, "wait", "KNOTLESS_WAITING")
	t.Setenv("KNOTLESS_WAITING", "soon")
	if err := Apply(fs); err == nil || !strings.Contains(err.Error(), "KNOTLESS_WAITING") {
		t.Errorf("a bad value: %v (d %v)", err, *d)
	}
}
