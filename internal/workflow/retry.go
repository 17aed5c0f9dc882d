package workflow

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/goccy/go-yaml/ast"
)

// RetryReasons are the reasons a run ends errored for its environment's
// doing, the ones `retry: {when: [...]}` may name (and the default when
// it names none): the job pod or container evicted, preempted or lost,
// the executor failing, the runner lost, the image not pulled, the pod
// not scheduled. A step's own failure (exit-code, timeout, oom-killed)
// and a cancel are never retried, nor is unsupported (the runner cannot
// run what the workflow asks: every attempt would end the same way). They
// are executor.EnvironmentFault's reasons but unsupported, as api names
// them (a test keeps the two lists so).
var RetryReasons = []string{"evicted", "preempted", "pod-lost", "runner-lost", "executor", "image-pull", "unschedulable"}

// MaxRetries caps `retry: {max: N}`.
const MaxRetries = 5

// Retry is `retry:`: a run that ends errored with one of When is run
// again as a new attempt, up to Max times after the first.
type Retry struct {
	Max  int      // 1..MaxRetries
	When []string // reasons from RetryReasons, in file order
}

// Retries reports whether a run of attempt (1 for the first) that ended
// errored with reason gets another attempt.
func (r *Retry) Retries(attempt int, reason string) bool {
	return r != nil && attempt <= r.Max && slices.Contains(r.When, reason)
}

var retryKeys = []string{"max", "when"}

// retry reads `retry:`: a number (every reason of RetryReasons, that many
// times) or a mapping with max (default 1) and when (default every one).
func (d *decoder) retry(e entry) *Retry {
	r := &Retry{Max: 1}
	if _, isInt := e.val.(*ast.IntegerNode); isInt {
		n, ok := d.retryMax(e)
		if !ok {
			return nil
		}
		r.Max, r.When = n, slices.Clone(RetryReasons)
		return r
	}
	if isNull(e.val) {
		d.errorf(e.kpos, "retry is empty; write retry: 2, or retry: {max: 2, when: [evicted, runner-lost]}")
		return nil
	}
	if _, ok := e.val.(*ast.MappingNode); !ok {
		if _, ok := e.val.(*ast.MappingValueNode); !ok {
			d.errorf(e.vpos(), "retry must be a number of attempts (retry: 2) or a mapping (retry: {max: 2, when: [evicted]}); got %s", kind(e.val))
			return nil
		}
	}
	good := true
	for _, x := range d.section(e, "retry", retryKeys) {
		switch x.key {
		case "max":
			n, ok := d.retryMax(x)
			good = good && ok
			r.Max = n
		case "when":
			items, ok := d.strList(x.val, x.vpos(), "retry.when", "[evicted, runner-lost]")
			good = good && ok
			if ok && len(items) == 0 {
				d.errorf(x.vpos(), "retry.when is empty; name the reasons to retry (%s), or leave when: out for all of them", strings.Join(RetryReasons, ", "))
				good = false
			}
			for _, it := range d.unique(items, "retry.when") {
				switch {
				case slices.Contains(RetryReasons, it.s):
					r.When = append(r.When, it.s)
				case it.s == "exit-code" || it.s == "timeout" || it.s == "oom-killed":
					d.errorf(it.p, "retry.when: %s is a step's own failure, which is never retried; retry is for failures of the run's environment: %s", it.s, strings.Join(RetryReasons, ", "))
					good = false
				case it.s == "unsupported":
					d.errorf(it.p, "retry.when: unsupported is never retried: the runner cannot run what the workflow asks (an architecture, container builds, more resources than it allows), and every attempt would end the same way; retry is for failures of the run's environment: %s", strings.Join(RetryReasons, ", "))
					good = false
				case it.s == "cancelled" || it.s == "superseded":
					d.errorf(it.p, "retry.when: a cancelled run is never retried; retry is for failures of the run's environment: %s", strings.Join(RetryReasons, ", "))
					good = false
				default:
					d.errorf(it.p, "retry.when: unknown reason %q; want one of %s", it.s, strings.Join(RetryReasons, ", "))
					good = false
				}
			}
		}
	}
	if !good {
		return nil
	}
	if r.When == nil {
		r.When = slices.Clone(RetryReasons)
	}
	return r
}

// retryMax reads a number of retries, 1..MaxRetries.
func (d *decoder) retryMax(e entry) (int, bool) {
	t, _ := scalarText(e.val)
	n, err := strconv.Atoi(t)
	if !isInt(e.val) || err != nil || n < 1 || n > MaxRetries {
		d.errorf(e.vpos(), "retry max must be a whole number of attempts after the first, 1 to %d; got %s", MaxRetries, kindOrText(e.val, isInt(e.val)))
		return 0, false
	}
	return n, true
}

func isInt(n ast.Node) bool {
	_, ok := n.(*ast.IntegerNode)
	return ok
}

// String is what lint --expand prints: "up to 2 times on evicted, runner-lost".
func (r *Retry) String() string {
	if r == nil {
		return "never"
	}
	times := "once"
	if r.Max > 1 {
		times = fmt.Sprintf("up to %d times", r.Max)
	}
	return times + " on " + strings.Join(r.When, ", ")
}
