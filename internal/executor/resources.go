package executor

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/units"
)

// Caps are a runner's limits for one job environment: what it gets when
// the workflow's resources: say nothing, and the most a workflow may ask
// for. CPUs in millicores, sizes in bytes; a zero Disk means the executor
// does not bound a job's disk this way (docker), and a workflow's disk:
// then changes nothing.
type Caps struct {
	MilliCPUs int64
	Memory    int64
	Disk      int64
}

// Resources are one environment's limits, resolved by Caps.Resolve: CPUs
// in millicores, sizes in bytes.
type Resources struct {
	MilliCPUs int64
	Memory    int64
	Disk      int64
}

// CapsOf reads a Job's CPUs and Memory (and a disk cap in bytes) into
// Caps. Errors name the flag (--cpus).
func CapsOf(job Job, disk int64) (Caps, error) {
	m, err := units.ParseCPUs(job.CPUs)
	if err != nil {
		return Caps{}, fmt.Errorf("--cpus %q: %v", job.CPUs, err)
	}
	return Caps{MilliCPUs: m, Memory: job.Memory, Disk: disk}, nil
}

// Resolve returns spec's resources: what the workflow asks for, each value
// it leaves out the cap. A workflow asking for more than a cap is refused
// with one *Fault (reason unsupported: every attempt would be) naming every such value with its cap
// and flag, written as the workflow spells them ("memory 4Gi (--memory
// 2Gi)").
func (c Caps) Resolve(spec Spec) (Resources, error) {
	r, over, err := c.within(Resources{MilliCPUs: c.MilliCPUs, Memory: c.Memory, Disk: c.Disk}, spec.CPUs, spec.MemoryBytes, spec.DiskBytes)
	if err != nil {
		return r, &Fault{Reason: api.ReasonExecutor, Message: err.Error()}
	}
	if len(over) > 0 {
		return r, &Fault{Reason: api.ReasonUnsupported, Message: "the workflow asks for more than this runner allows: " + strings.Join(over, ", ")}
	}
	return r, nil
}

// within returns base with each value asked for (cpus "" and sizes 0 ask
// for nothing) that is within its cap in its place, and what was asked
// beyond a cap, as the workflow spells it with the cap's flag. A disk is
// bounded only where the runner has a disk cap. The error is an
// unreadable cpus.
func (c Caps) within(base Resources, cpus string, memory, disk int64) (Resources, []string, error) {
	r := base
	var over []string
	if cpus != "" {
		m, err := units.ParseCPUs(cpus)
		if err != nil {
			return r, nil, fmt.Errorf("resources.cpus %q: %v", cpus, err)
		}
		if m > c.MilliCPUs {
			over = append(over, fmt.Sprintf("cpus %s (--cpus %s)", FormatCPUs(m), FormatCPUs(c.MilliCPUs)))
		} else {
			r.MilliCPUs = m
		}
	}
	if memory > 0 {
		if memory > c.Memory {
			over = append(over, fmt.Sprintf("memory %s (--memory %s)", units.FormatSize(memory), units.FormatSize(c.Memory)))
		} else {
			r.Memory = memory
		}
	}
	if disk > 0 {
		if c.Disk > 0 && disk > c.Disk {
			over = append(over, fmt.Sprintf("disk %s (--disk %s)", units.FormatSize(disk), units.FormatSize(c.Disk)))
		} else if c.Disk > 0 || base.Disk > 0 {
			r.Disk = disk
		}
	}
	return r, over, nil
}

// FormatCPUs writes millicores as a count when whole ("2"), else with the
// m suffix ("500m"), as Kubernetes does.
func FormatCPUs(milli int64) string {
	if milli%1000 == 0 {
		return strconv.FormatInt(milli/1000, 10)
	}
	return strconv.FormatInt(milli, 10) + "m"
}

// ImageAndResources is the image and the resources of spec's environment:
// spec's image, else defaultImage (a workflow naming none on a runner with
// no default is an error saying so), and Resolve's resources.
func (c Caps) ImageAndResources(spec Spec, defaultImage string) (string, Resources, error) {
	image := spec.Image
	if image == "" {
		image = defaultImage
	}
	if image == "" {
		return "", Resources{}, errors.New("the workflow names no image: and the runner has no default image (--image)")
	}
	r, err := c.Resolve(spec)
	return image, r, err
}

// ServiceResources returns service s's resources: what the workflow asks
// for, each value it leaves out DefaultServiceResources (at most the
// cap). A service asking for more than a cap (the job's: --cpus, --memory,
// --disk) is refused with a *Fault (reason executor) naming the service.
func (c Caps) ServiceResources(s Service) (Resources, error) {
	d := DefaultServiceResources
	base := Resources{MilliCPUs: min(d.MilliCPUs, c.MilliCPUs), Memory: min(d.Memory, c.Memory), Disk: d.Disk}
	if c.Disk > 0 {
		base.Disk = min(d.Disk, c.Disk)
	}
	r, over, err := c.within(base, s.CPUs, s.MemoryBytes, s.DiskBytes)
	if err != nil {
		return r, &Fault{Reason: api.ReasonExecutor, Message: fmt.Sprintf("service %s %v", s.Name, err)}
	}
	if len(over) > 0 {
		return r, &Fault{Reason: api.ReasonUnsupported, Message: fmt.Sprintf("service %s asks for more than this runner allows: %s", s.Name, strings.Join(over, ", "))}
	}
	return r, nil
}
