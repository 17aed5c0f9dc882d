package workflow

import (
	"fmt"
	"regexp"
	"strconv"
	"time"

	"github.com/goccy/go-yaml/ast"
)

// Service is one entry of `services:`: a container of its own image that
// runs beside the job from before its first step to after its last,
// reachable by the steps at 127.0.0.1 (it shares the job's network
// namespace), hardened as the job is. The docker and kube executors run
// services; the shell executor cannot.
type Service struct {
	// Name is the service's key: a DNS label of at most 30 characters
	// (it names a container), not "job".
	Name string
	// Image is the service's image. Required.
	Image string
	// Env holds plain variables of the service (they are in its container's
	// or pod's spec: never a secret).
	Env map[string]string
	// Command, when set, is the service's argv, in place of the image's
	// own entrypoint and command. Required when Secrets is set.
	Command []string
	// Secrets are the workflow's secrets the service gets as variables:
	// they reach it over a stream when it starts, never through a spec.
	Secrets []string
	// Ports are TCP ports on 127.0.0.1 the service is ready once all
	// accept connections.
	Ports []int
	// Ready, when set, is a shell command run in the service's container
	// (its /bin/sh) until it exits 0: the service is then ready.
	Ready string
	// ReadyTimeout bounds the wait for Ports and Ready (DefaultReadyTimeout).
	ReadyTimeout time.Duration
	// Resources are the service's own cpus, memory and disk (its /tmp):
	// 1 CPU, 512Mi and 1Gi when left out, never more than the runner's
	// caps.
	Resources Resources
}

// Limits of services:.
const (
	MaxServices         = 8
	DefaultReadyTimeout = 2 * time.Minute
)

var (
	serviceKeys = []string{"image", "env", "command", "secrets", "ports", "ready", "ready-timeout", "resources"}
	serviceName = regexp.MustCompile(`^[a-z]([a-z0-9-]{0,28}[a-z0-9])?$`)
)

// services reads `services:`, a mapping of service names to their
// settings; secret names must be among allowed (the workflow's secrets:).
func (d *decoder) services(e entry, allowed map[string]bool) []Service {
	if isNull(e.val) {
		return nil
	}
	es, ok := d.entries(e.val, e.vpos(), "services")
	if !ok {
		return nil
	}
	if len(es) > MaxServices {
		d.errorf(e.vpos(), "services names %d services; at most %d", len(es), MaxServices)
		return nil
	}
	var out []Service
	for _, x := range es {
		where := "service " + x.key
		switch {
		case !serviceName.MatchString(x.key):
			d.errorf(x.kpos, "service name %q: use 1-30 lower-case letters, digits and '-', starting with a letter (it names a container)", x.key)
			continue
		case x.key == "job":
			d.errorf(x.kpos, "service name job is the job's own container; choose another")
			continue
		}
		s := Service{Name: x.key, ReadyTimeout: DefaultReadyTimeout}
		var secrets []item
		var command *entry
		for _, y := range d.section(x, where, serviceKeys) {
			switch y.key {
			case "image":
				if v, ok := d.imageText(y, where+" image"); ok {
					s.Image = v
				}
			case "env":
				s.Env, _ = d.env(y, where+" env")
			case "command":
				items, _ := d.strList(y.val, y.vpos(), where+" command", "[postgres, -c, fsync=off]")
				for _, it := range items {
					s.Command = append(s.Command, it.s)
				}
				if len(s.Command) == 0 {
					d.errorf(y.vpos(), "%s command is empty; give the argv, or remove command: for the image's own", where)
				}
				yy := y
				command = &yy
			case "secrets":
				secrets = d.secretNames(y, where+" secrets")
				for _, it := range secrets {
					if !allowed[it.s] {
						d.errorf(it.p, "secret %s is not listed in the workflow's secrets; add it there too (secrets: [%s])", it.s, it.s)
						continue
					}
					s.Secrets = append(s.Secrets, it.s)
				}
			case "ports":
				s.Ports = d.ports(y, where+" ports")
			case "ready":
				if v, ok := d.str(y.val, y.vpos(), where+" ready"); ok {
					s.Ready = v
				}
			case "ready-timeout":
				if t, ok := d.duration(y, where+" ready-timeout"); ok {
					s.ReadyTimeout = t
				}
			case "resources":
				s.Resources = d.resources(y)
			}
		}
		if s.Image == "" {
			d.errorf(x.kpos, "%s has no image: (services: {%s: {image: postgres:16}})", where, x.key)
		}
		if len(s.Secrets) > 0 && command == nil {
			d.errorf(x.kpos, "%s asks for secrets but gives no command:; a service's secrets reach it over a stream when Knotless starts its command, so give the argv (command: [...])", where)
		}
		out = append(out, s)
	}
	return out
}

// ports reads a list of TCP ports (1-65535).
func (d *decoder) ports(e entry, what string) []int {
	nodes, ps, ok := d.list(e.val, e.vpos(), what, "[5432]")
	if !ok {
		return nil
	}
	var out []int
	for i, n := range nodes {
		in, isInt := n.(*ast.IntegerNode)
		if !isInt {
			d.errorf(ps[i], "%s: want a port number (1-65535); got %s", what, kind(n))
			continue
		}
		txt, _ := scalarText(in)
		p, err := strconv.Atoi(txt)
		if err != nil || p < 1 || p > 65535 {
			d.errorf(ps[i], "%s: %s is not a port number (1-65535)", what, txt)
			continue
		}
		out = append(out, p)
	}
	return out
}

// ServiceProbe says how a service's readiness is checked, for logs.
func (s Service) ServiceProbe() string {
	switch {
	case len(s.Ports) > 0 && s.Ready != "":
		return fmt.Sprintf("ports %v and %q", s.Ports, s.Ready)
	case len(s.Ports) > 0:
		return fmt.Sprintf("ports %v", s.Ports)
	case s.Ready != "":
		return fmt.Sprintf("%q", s.Ready)
	}
	return "none (started is ready)"
}
