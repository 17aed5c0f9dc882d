package docker

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os/exec"
	"strings"

	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/errdefs"
	"knotless.dev/knotless/internal/executor/agentenv"
)

// network returns the network job containers join: Config.Network, or
// (empty) this runner's own bridge network, made once (ensureNetwork).
func (e *Executor) network(ctx context.Context) (string, error) {
	if e.cfg.Network != "" {
		if e.cfg.Network == "host" {
			return "", fmt.Errorf("--network host: job containers never share the host's network")
		}
		return e.cfg.Network, nil
	}
	// Made once per process; a failure is tried again at the next run.
	e.netMu.Lock()
	defer e.netMu.Unlock()
	if e.netName == "" {
		name, err := e.ensureNetwork(ctx)
		if err != nil {
			return "", err
		}
		e.netName = name
	}
	return e.netName, nil
}

// NetworkName is the name of a runner's own network.
func NetworkName(runner string) string { return containerName(runner, "net") }

// BridgeName is the host interface of a runner's own network: "kn-" and
// 12 hex digits of its name's SHA-256 (interface names have at most 15
// characters).
func BridgeName(runner string) string {
	sum := sha256.Sum256([]byte(NetworkName(runner)))
	return "kn-" + hex.EncodeToString(sum[:6])
}

// ensureNetwork makes (or finds) the runner's own bridge network:
// labelled as the runner's, inter-container communication off
// (com.docker.network.bridge.enable_icc=false: one run's container cannot
// reach another's), with a host interface of a known name, BridgeName.
// Then it makes the host unreachable from that interface (blockHost).
func (e *Executor) ensureNetwork(ctx context.Context) (string, error) {
	name, bridge := NetworkName(e.cfg.Runner), BridgeName(e.cfg.Runner)
	_, err := e.api.NetworkInspect(ctx, name, network.InspectOptions{})
	if errdefs.IsNotFound(err) {
		_, err = e.api.NetworkCreate(ctx, name, network.CreateOptions{
			Driver: "bridge",
			Labels: map[string]string{agentenv.LabelManagedBy: agentenv.ManagedBy, agentenv.LabelExecutor: Name, agentenv.LabelRunner: e.cfg.Runner},
			Options: map[string]string{
				"com.docker.network.bridge.enable_icc": "false",
				"com.docker.network.bridge.name":       bridge,
			},
		})
		if errdefs.IsConflict(err) {
			err = nil // made by another process in between
		}
	}
	if err != nil {
		return "", fmt.Errorf("the runner's network %s: %w (or give --network NAME)", name, err)
	}
	if err := blockHost(ctx, bridge); err != nil {
		e.log.Warn("job containers can reach this host's own services (and link-local addresses): the rules that block them could not be added (run the runner as root with iptables installed, or give --network with a network of your own)", "network", name, "bridge", bridge, "err", err)
	} else {
		e.log.Info("job network ready: no inter-container communication, the host and link-local addresses (cloud metadata) unreachable", "network", name, "bridge", bridge)
	}
	return name, nil
}

// blockHost drops every new connection from bridge to this host (the
// iptables INPUT chain: the gateway address and every other address of
// the host), unless the rule is there already. Replies to connections the
// host made stay allowed; forwarded traffic (the internet) is not
// touched.
//
// It also drops what the bridge's containers send to link-local addresses
// (169.254.0.0/16: a cloud's instance metadata service, which hands out
// the machine's credentials) in the engine's DOCKER-USER chain, which the
// engine evaluates before its own forwarding rules.
func blockHost(ctx context.Context, bridge string) error {
	for _, rule := range [][]string{hostRule(bridge), metadataRule(bridge)} {
		if exec.CommandContext(ctx, "iptables", append([]string{"-w", "-C"}, rule...)...).Run() == nil {
			continue
		}
		out, err := exec.CommandContext(ctx, "iptables", append([]string{"-w", "-I"}, rule...)...).CombinedOutput()
		if err != nil {
			return fmt.Errorf("iptables: %v: %s", err, strings.TrimSpace(string(out)))
		}
	}
	return nil
}

// RemoveNetwork removes the runner's own network and the rule blockHost
// added for it, for a runner that goes away for good (and tests). A
// network that is gone is no error; one still in use is.
func (e *Executor) RemoveNetwork(ctx context.Context) error {
	for _, rule := range [][]string{hostRule(BridgeName(e.cfg.Runner)), metadataRule(BridgeName(e.cfg.Runner))} {
		for exec.CommandContext(ctx, "iptables", append([]string{"-w", "-D"}, rule...)...).Run() == nil {
		}
	}
	err := e.api.NetworkRemove(ctx, NetworkName(e.cfg.Runner))
	if err != nil && !errdefs.IsNotFound(err) {
		return fmt.Errorf("remove network %s: %w", NetworkName(e.cfg.Runner), err)
	}
	return nil
}

// hostRule is the iptables rule (INPUT chain) that keeps bridge's
// containers from the host.
func hostRule(bridge string) []string {
	return []string{"INPUT", "-i", bridge, "-m", "conntrack", "--ctstate", "NEW,INVALID", "-m", "comment", "--comment", "knotless: job containers may not reach the host", "-j", "DROP"}
}

// metadataRule is the iptables rule (DOCKER-USER chain) that keeps
// bridge's containers from link-local addresses.
func metadataRule(bridge string) []string {
	return []string{"DOCKER-USER", "-i", bridge, "-d", "169.254.0.0/16", "-m", "comment", "--comment", "knotless: job containers may not reach link-local addresses (cloud metadata)", "-j", "DROP"}
}

// HostRules are the iptables rules (table filter, in iptables -C form)
// that ensureNetwork adds for a runner's own network, for tests and
// doctor-style checks.
func HostRules(runner string) [][]string {
	return [][]string{hostRule(BridgeName(runner)), metadataRule(BridgeName(runner))}
}
