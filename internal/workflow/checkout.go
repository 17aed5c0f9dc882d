package workflow

import (
	"strconv"

	"github.com/goccy/go-yaml/ast"
)

// Values of Checkout.Submodules.
const (
	SubmodulesNone      = ""          // `submodules: false` (the default)
	SubmodulesTop       = "true"      // `submodules: true`: the top level only
	SubmodulesRecursive = "recursive" // `submodules: recursive`: nested ones too
)

// Checkout is the `checkout:` section: how much of the repository the run's
// checkout holds. The zero value is not the default; see DefaultCheckout.
type Checkout struct {
	// Depth is the number of commits of history (git clone --depth);
	// 0 means the whole history of the commit.
	Depth int
	// Tags says whether the repository's tags are in the checkout (the
	// triggering tag is there whatever this says).
	Tags bool
	// Submodules is SubmodulesNone, SubmodulesTop or SubmodulesRecursive.
	Submodules string
}

// DefaultCheckout is what a workflow without `checkout:` gets: the whole
// history of the commit and every tag, so `git describe --tags`,
// goreleaser and setuptools-scm find the latest tag; no submodules.
var DefaultCheckout = Checkout{Depth: 0, Tags: true}

var checkoutKeys = []string{"depth", "tags", "submodules"}

func (d *decoder) checkout(e entry) Checkout {
	c := DefaultCheckout
	for _, x := range d.section(e, "checkout", checkoutKeys) {
		switch x.key {
		case "depth":
			n, ok := x.val.(*ast.IntegerNode)
			t, _ := scalarText(x.val)
			v, err := strconv.Atoi(t)
			if !ok || err != nil || v < 0 {
				d.errorf(x.vpos(), "checkout.depth must be a whole number of commits (0 = the whole history); got %s", kindOrText(x.val, n != nil))
				continue
			}
			c.Depth = v
		case "tags":
			if b, ok := d.boolean(x, "checkout.tags"); ok {
				c.Tags = b
			}
		case "submodules":
			if b, ok := x.val.(*ast.BoolNode); ok {
				c.Submodules = SubmodulesNone
				if b.Value {
					c.Submodules = SubmodulesTop
				}
				continue
			}
			if s, ok := scalarText(x.val); ok && s == SubmodulesRecursive {
				if _, isStr := x.val.(*ast.StringNode); isStr {
					c.Submodules = SubmodulesRecursive
					continue
				}
			}
			d.errorf(x.vpos(), "checkout.submodules must be false, true or recursive; got %s", kind(x.val))
		}
	}
	return c
}

// kindOrText is a value's text when it is a number (so -1 reads as -1),
// else what kind of value it is.
func kindOrText(n ast.Node, isInt bool) string {
	if t, ok := scalarText(n); ok && isInt {
		return t
	}
	return kind(n)
}
