package executor

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"knotless.dev/knotless/internal/api"
	"knotless.dev/knotless/internal/workflow"
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
	m, err := workflow.ParseCPUs(job.CPUs)
	if err != nil {
		return Caps{}, fmt.Errorf("--cpus %q: %v", job.CPUs, err)
	}
	return Caps{MilliCPUs: m, Memory: job.Memory, Disk: disk}, nil
}

// Resolve returns spec's resources: what the workflow asks for, each value
// it leaves out the cap. A workflow asking for more than a cap is refused
// with one *Fault (reason executor) naming every such value with its cap
// and flag, written as the workflow spells them ("memory 4Gi (--memory
// 2Gi)").
func (c Caps) Resolve(spec Spec) (Resources, error) {
	r := Resources{MilliCPUs: c.MilliCPUs, Memory: c.Memory, Disk: c.Disk}
	var over []string
	if spec.CPUs != "" {
		m, err := workflow.ParseCPUs(spec.CPUs)
		if err != nil {
			return r, &Fault{Reason: api.ReasonExecutor, Message: fmt.Sprintf("resources.cpus %q: %v", spec.CPUs, err)}
		}
		if m > c.MilliCPUs {
			over = append(over, fmt.Sprintf("cpus %s (--cpus %s)", FormatCPUs(m), FormatCPUs(c.MilliCPUs)))
		} else {
			r.MilliCPUs = m
		}
	}
	if spec.MemoryBytes > 0 {
		if spec.MemoryBytes > c.Memory {
			over = append(over, fmt.Sprintf("memory %s (--memory %s)", workflow.FormatSize(spec.MemoryBytes), workflow.FormatSize(c.Memory)))
		} else {
			r.Memory = spec.MemoryBytes
		}
	}
	if spec.DiskBytes > 0 && c.Disk > 0 {
		if spec.DiskBytes > c.Disk {
			over = append(over, fmt.Sprintf("disk %s (--disk %s)", workflow.FormatSize(spec.DiskBytes), workflow.FormatSize(c.Disk)))
		} else {
			r.Disk = spec.DiskBytes
		}
	}
	if len(over) > 0 {
		return r, &Fault{Reason: api.ReasonExecutor, Message: "the workflow asks for more than this runner allows: " + strings.Join(over, ", ")}
	}
	return r, nil
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
	capped := Caps{MilliCPUs: min(d.MilliCPUs, c.MilliCPUs), Memory: min(d.Memory, c.Memory), Disk: d.Disk}
	if c.Disk > 0 {
		capped.Disk = min(d.Disk, c.Disk)
	}
	r := Resources{MilliCPUs: capped.MilliCPUs, Memory: capped.Memory, Disk: capped.Disk}
	var over []string
	if s.CPUs != "" {
		m, err := workflow.ParseCPUs(s.CPUs)
		if err != nil {
			return r, &Fault{Reason: api.ReasonExecutor, Message: fmt.Sprintf("service %s resources.cpus %q: %v", s.Name, s.CPUs, err)}
		}
		if m > c.MilliCPUs {
			over = append(over, fmt.Sprintf("cpus %s (--cpus %s)", FormatCPUs(m), FormatCPUs(c.MilliCPUs)))
		} else {
			r.MilliCPUs = m
		}
	}
	if s.MemoryBytes > 0 {
		if s.MemoryBytes > c.Memory {
			over = append(over, fmt.Sprintf("memory %s (--memory %s)", workflow.FormatSize(s.MemoryBytes), workflow.FormatSize(c.Memory)))
		} else {
			r.Memory = s.MemoryBytes
		}
	}
	if s.DiskBytes > 0 {
		if c.Disk > 0 && s.DiskBytes > c.Disk {
			over = append(over, fmt.Sprintf("disk %s (--disk %s)", workflow.FormatSize(s.DiskBytes), workflow.FormatSize(c.Disk)))
		} else {
			r.Disk = s.DiskBytes
		}
	}
	if len(over) > 0 {
		return r, &Fault{Reason: api.ReasonExecutor, Message: fmt.Sprintf("service %s asks for more than this runner allows: %s", s.Name, strings.Join(over, ", "))}
	}
	return r, nil
}
