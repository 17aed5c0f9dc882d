package cluster

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// Our build-time changes to upstream modules. They edit a copy of the module
// source by exact text replacement and fail when a snippet is not found (or
// found a different number of times than expected), so a version bump can
// never silently build an unpatched binary. Upstream code is never committed
// here; only these edits are.

// sourceEdit replaces old by new in file (relative to the module root), which
// must contain old exactly count times.
type sourceEdit struct {
	file, old, new string
	count          int
}

func applyEdits(root string, edits []sourceEdit) error {
	for _, e := range edits {
		path := filepath.Join(root, filepath.FromSlash(e.file))
		data, err := os.ReadFile(path)
		if err != nil {
			return fmt.Errorf("patch %s: %w", e.file, err)
		}
		text := string(data)
		if n := strings.Count(text, e.old); n != e.count {
			return fmt.Errorf("patch %s: expected snippet found %d times, want %d (has the upstream version changed?):\n%s",
				e.file, n, e.count, e.old)
		}
		info, err := os.Stat(path)
		if err != nil {
			return fmt.Errorf("patch %s: %w", e.file, err)
		}
		if err := os.WriteFile(path, []byte(strings.ReplaceAll(text, e.old, e.new)), info.Mode().Perm()); err != nil {
			return fmt.Errorf("patch %s: %w", e.file, err)
		}
	}
	return nil
}

// nfqueueHelperFile is added to kube-network-policies' networkpolicy package.
const nfqueueHelperFile = "pkg/networkpolicy/knotless_nfqueue.go"

// nfqueueHelperSource replaces the native nft queue expression. The kernels of
// our machines lack CONFIG_NFT_QUEUE and load no modules, so a rule with
// `queue num N` is refused ("No such file or directory"), while the x_tables
// NFQUEUE target (nft_compat + xt_NFQUEUE) is built in and feeds the same
// nfnetlink queue.
const nfqueueHelperSource = `// Added by the Knotless test-cluster build step; not part of upstream.

package networkpolicy

import (
	"encoding/binary"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"github.com/google/nftables/xt"
	"golang.org/x/sys/unix"
)

// knotlessNFQueue returns the x_tables NFQUEUE target (revision 3) sending
// packets to queue num, the equivalent of the nft expression
// "queue num <num> [bypass]" for kernels without CONFIG_NFT_QUEUE.
// Its info is struct xt_NFQ_info_v3 in host byte order: queuenum u16,
// queues_total u16, flags u16 (NFQ_FLAG_BYPASS = 1), padded to 8 bytes.
func knotlessNFQueue(num uint16, bypass bool) *expr.Target {
	info := make(xt.Unknown, 8)
	binary.NativeEndian.PutUint16(info[0:2], num)
	binary.NativeEndian.PutUint16(info[2:4], 1)
	if bypass {
		binary.NativeEndian.PutUint16(info[4:6], 1)
	}
	return &expr.Target{Name: "NFQUEUE", Rev: 3, Info: &info}
}

// knotlessAddInputChain adds an input-hook chain that sends the first packet
// of every connection from a pod that policies select to the node's own
// addresses (the node, its kubelet, the API server on it, a Service
// translated to one of them) to the same queue as the postrouting chain.
// Upstream filters in postrouting only, which locally delivered packets
// never pass, so such traffic escaped every egress policy.
func knotlessAddInputChain(nft *nftables.Conn, table *nftables.Table, queue expr.Any) {
	chain := nft.AddChain(&nftables.Chain{
		Name:     "knotless-input",
		Table:    table,
		Type:     nftables.ChainTypeFilter,
		Hooknum:  nftables.ChainHookInput,
		Priority: nftables.ChainPriorityFilter,
	})
	// ct state established,related accept
	nft.AddRule(&nftables.Rule{
		Table: table,
		Chain: chain,
		Exprs: []expr.Any{
			&expr.Ct{Register: 0x1, SourceRegister: false, Key: expr.CtKeySTATE},
			&expr.Bitwise{SourceRegister: 0x1, DestRegister: 0x1, Len: 0x4, Mask: binaryutil.NativeEndian.PutUint32(expr.CtStateBitESTABLISHED | expr.CtStateBitRELATED), Xor: []byte{0x0, 0x0, 0x0, 0x0}},
			&expr.Cmp{Op: expr.CmpOpNeq, Register: 0x1, Data: []byte{0x0, 0x0, 0x0, 0x0}},
			&expr.Verdict{Kind: expr.VerdictAccept},
		},
	})
	// ip saddr @podips-v4 queue; ip6 saddr @podips-v6 queue
	for _, f := range []struct {
		proto        byte
		offset, size uint32
		set          string
	}{{unix.NFPROTO_IPV4, 12, 4, "podips-v4"}, {unix.NFPROTO_IPV6, 8, 16, "podips-v6"}} {
		nft.AddRule(&nftables.Rule{
			Table: table,
			Chain: chain,
			Exprs: []expr.Any{
				&expr.Meta{Key: expr.MetaKeyNFPROTO, SourceRegister: false, Register: 0x1},
				&expr.Cmp{Op: expr.CmpOpEq, Register: 0x1, Data: []byte{f.proto}},
				&expr.Payload{DestRegister: 0x1, Base: expr.PayloadBaseNetworkHeader, Offset: f.offset, Len: f.size},
				&expr.Lookup{SourceRegister: 0x1, DestRegister: 0x0, SetName: f.set},
				queue,
			},
		})
	}
}
`

// networkPoliciesEdits are our changes to kube-network-policies v0.8.0:
//  1. every native queue expression becomes knotlessNFQueue (see above), with
//     the same queue number and bypass flag;
//  2. cmd/main.go uses the kubeconfig named by KUBECONFIG when set (the
//     enforcer runs as a host process, not in a pod), in-cluster config
//     otherwise;
//  3. an input-hook chain queues the connections of policy-selected pods to
//     the node's own addresses (knotlessAddInputChain), which upstream's
//     postrouting chain never sees.
var networkPoliciesEdits = []sourceEdit{
	{
		file: "pkg/networkpolicy/controller.go",
		old:  "\tif c.config.NetfilterBug1766Fix {\n\t\tc.addDNSRacersWorkaroundRules(nft, table)\n\t}\n",
		new: "\tif !c.config.AdminNetworkPolicy && !c.config.BaselineAdminNetworkPolicy {\n\t\tknotlessAddInputChain(nft, table, queue)\n\t}\n" +
			"\tif c.config.NetfilterBug1766Fix {\n\t\tc.addDNSRacersWorkaroundRules(nft, table)\n\t}\n",
		count: 1,
	},
	{
		file: "pkg/networkpolicy/controller.go",
		old: "\tqueue := &expr.Queue{Num: uint16(c.config.QueueID)}\n" +
			"\tif c.config.FailOpen {\n" +
			"\t\tqueue.Flag = expr.QueueFlagBypass\n" +
			"\t}\n",
		new:   "\tqueue := knotlessNFQueue(uint16(c.config.QueueID), c.config.FailOpen)\n",
		count: 2, // the postrouting chain and the prerouting chain
	},
	{
		file:  "pkg/networkpolicy/dnsagent.go",
		old:   "&expr.Queue{Num: uint16(n.nfQueueID), Flag: expr.QueueFlagBypass},",
		new:   "knotlessNFQueue(uint16(n.nfQueueID), true),",
		count: 1,
	},
	{
		file:  "cmd/main.go",
		old:   "\t\"k8s.io/client-go/rest\"\n",
		new:   "\t\"k8s.io/client-go/rest\"\n\t\"k8s.io/client-go/tools/clientcmd\"\n",
		count: 1,
	},
	{
		file: "cmd/main.go",
		old: "\tconfig, err := rest.InClusterConfig()\n" +
			"\tif err != nil {\n" +
			"\t\tpanic(err.Error())\n" +
			"\t}\n",
		new: "\t// Knotless: a host process reads the kubeconfig named by KUBECONFIG.\n" +
			"\tvar config *rest.Config\n" +
			"\tif kubeconfig := os.Getenv(\"KUBECONFIG\"); kubeconfig != \"\" {\n" +
			"\t\tconfig, err = clientcmd.BuildConfigFromFlags(\"\", kubeconfig)\n" +
			"\t} else {\n" +
			"\t\tconfig, err = rest.InClusterConfig()\n" +
			"\t}\n" +
			"\tif err != nil {\n" +
			"\t\tpanic(err.Error())\n" +
			"\t}\n",
		count: 1,
	},
}

// patchNetworkPolicies applies networkPoliciesEdits to the kube-network-policies
// source at root, adds the knotlessNFQueue helper, and checks that no native
// queue expression is left in any non-test Go file.
func patchNetworkPolicies(root string) error {
	if err := applyEdits(root, networkPoliciesEdits); err != nil {
		return fmt.Errorf("patch kube-network-policies: %w", err)
	}
	helper := filepath.Join(root, filepath.FromSlash(nfqueueHelperFile))
	if err := os.WriteFile(helper, []byte(nfqueueHelperSource), 0o644); err != nil {
		return fmt.Errorf("patch kube-network-policies: add %s: %w", nfqueueHelperFile, err)
	}
	left, err := filesContaining(root, "expr.Queue{")
	if err != nil {
		return fmt.Errorf("patch kube-network-policies: %w", err)
	}
	if len(left) > 0 {
		return fmt.Errorf("patch kube-network-policies: native nft queue expressions left in %s", strings.Join(left, ", "))
	}
	return nil
}

// CoreDNSPlugins are the only plugins our CoreDNS build holds: those the
// cluster's Corefile (addons.go) uses, and log for debugging. Upstream's
// default build holds some sixty, among them forward, grpc and the cloud
// providers' (route53, azure, clouddns), whose SDKs made most of its build
// time; leaving them out keeps every query inside the machine (no forward,
// no grpc) and builds in a fraction of the time.
var CoreDNSPlugins = []string{"cache", "errors", "health", "kubernetes", "loadbalance", "log", "ready"}

// patchCoreDNS leaves every plugin but CoreDNSPlugins out of the CoreDNS
// source at root: zplugin.go imports the plugins (registering them) and
// zdirectives.go orders their directives; both are generated from plugin.cfg
// upstream, and we filter the generated files, keeping upstream's order. It
// fails when a wanted plugin is missing from either file, when nothing is
// left out (patched already, or upstream changed its layout), and when
// anything outside the forward plugin itself still imports it.
func patchCoreDNS(root string) error {
	keep := map[string]bool{}
	for _, p := range CoreDNSPlugins {
		keep[p] = true
	}
	if err := filterLines(root, "core/plugin/zplugin.go", CoreDNSPlugins, func(line string) (bool, string) {
		if !strings.HasPrefix(line, "\t_ \"") {
			return true, ""
		}
		name := strings.TrimSuffix(line[strings.LastIndex(line, "/")+1:], "\"")
		if !strings.HasPrefix(line, "\t_ \"github.com/coredns/coredns/plugin/") {
			name = "" // another module's plugin (caddy's onevent)
		}
		return keep[name], name
	}); err != nil {
		return fmt.Errorf("patch coredns: %w", err)
	}
	if err := filterLines(root, "core/dnsserver/zdirectives.go", CoreDNSPlugins, func(line string) (bool, string) {
		t := strings.TrimSpace(line)
		if !strings.HasPrefix(line, "\t\"") || !strings.HasSuffix(t, "\",") {
			return true, ""
		}
		name := strings.Trim(t, "\",")
		return keep[name], name
	}); err != nil {
		return fmt.Errorf("patch coredns: %w", err)
	}
	left, err := filesContaining(root, "\"github.com/coredns/coredns/plugin/forward\"")
	if err != nil {
		return fmt.Errorf("patch coredns: %w", err)
	}
	if len(left) > 0 {
		return fmt.Errorf("patch coredns: the forward plugin is still imported by %s", strings.Join(left, ", "))
	}
	return nil
}

// filterLines rewrites file (relative to root) without the lines that
// decide drops. decide returns whether to keep a line and, for a line that
// names something (a plugin), its name. Every name of want must be named
// and kept, and at least one line dropped, or the file is left as it was
// and an error names it.
func filterLines(root, file string, want []string, decide func(line string) (keep bool, name string)) error {
	path := filepath.Join(root, filepath.FromSlash(file))
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	var out strings.Builder
	kept, dropped := map[string]bool{}, 0
	for _, line := range strings.SplitAfter(string(data), "\n") {
		keep, name := decide(strings.TrimSuffix(line, "\n"))
		if !keep {
			dropped++
			continue
		}
		if name != "" {
			kept[name] = true
		}
		out.WriteString(line)
	}
	for _, p := range want {
		if !kept[p] {
			return fmt.Errorf("%s does not name the plugin %s (has the upstream version changed?)", file, p)
		}
	}
	if dropped == 0 {
		return fmt.Errorf("%s: nothing to leave out (patched already, or the upstream layout changed)", file)
	}
	info, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	if err := os.WriteFile(path, []byte(out.String()), info.Mode().Perm()); err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	return nil
}

// filesContaining lists the non-test Go files under root (relative, slash
// separated) containing s, skipping plugin/forward itself and testdata.
func filesContaining(root, s string) ([]string, error) {
	var found []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if d.Name() == "testdata" || rel == "plugin/forward" {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(rel, ".go") || strings.HasSuffix(rel, "_test.go") {
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if strings.Contains(string(data), s) {
			found = append(found, rel)
		}
		return nil
	})
	return found, err
}

// runscShimBootstrapFile is added to gVisor's shim/v1/cli package.
const runscShimBootstrapFile = "shim/v1/cli/knotless_bootstrap.go"

// runscShimBootstrapSource makes the shim's "start" action print what
// containerd 1.6 (Debian 12's) reads. gVisor's shim is built on containerd
// 2's shim library, whose start action prints bootstrap parameters as JSON
// ({"version":2,"address":"unix:///run/containerd/s/...","protocol":"ttrpc"});
// containerd 1.6 takes the whole output for the address and fails every
// sandbox with `dial unix  {"version":2,...}: connect: invalid argument`.
const runscShimBootstrapSource = `// Added by the Knotless test-cluster build step; not part of upstream.

package cli

import (
	"encoding/json"
	"io"
	"os"
)

// knotlessPlainAddress runs run (the shim's main) and, for the "start"
// action (the last argument containerd passes), writes to stdout only the
// address of the JSON bootstrap parameters containerd 2's shim library
// prints: containerd 1.6 reads the start action's output as the address.
func knotlessPlainAddress(run func()) {
	if len(os.Args) < 2 || os.Args[len(os.Args)-1] != "start" {
		run()
		return
	}
	stdout := os.Stdout
	r, w, err := os.Pipe()
	if err != nil {
		run()
		return
	}
	os.Stdout = w
	read := make(chan []byte, 1)
	go func() {
		b, _ := io.ReadAll(r)
		read <- b
	}()
	run()
	os.Stdout = stdout
	w.Close()
	out := <-read
	var params struct {
		Address string ` + "`json:\"address\"`" + `
	}
	if json.Unmarshal(out, &params) == nil && params.Address != "" {
		out = []byte(params.Address)
	}
	_, _ = stdout.Write(out)
}
`

// runscShimEdits are our changes to gVisor's containerd shim:
//  1. the start action prints the plain address containerd 1.6 dials
//     (knotlessPlainAddress, above);
//  2. the shim keeps its inherited OOM score when it may not lower it to
//     -999: root on our machines lacks CAP_SYS_RESOURCE, and upstream fails
//     every sandbox with "failed to set OOM Score on shim: write
//     /proc/PID/oom_score_adj: permission denied" (the reason containerd's
//     config has restrict_oom_score_adj for runc).
var runscShimEdits = []sourceEdit{
	{
		file:  "shim/v1/cli/cli.go",
		old:   "\tcontainerdshim.Run(context.Background(), shim.NewShimManager(\"io.containerd.runsc.v1\"))\n",
		new:   "\tknotlessPlainAddress(func() {\n\t\tcontainerdshim.Run(context.Background(), shim.NewShimManager(\"io.containerd.runsc.v1\"))\n\t})\n",
		count: 1,
	},
	{
		file: "pkg/shim/v1/manager.go",
		old: "\tif err := sys.SetOOMScore(cmd.Process.Pid, oomScoreMax); err != nil {\n" +
			"\t\treturn shim.BootstrapParams{}, fmt.Errorf(\"failed to set OOM Score on shim: %w\", err)\n" +
			"\t}\n",
		new: "\tif err := sys.SetOOMScore(cmd.Process.Pid, oomScoreMax); err != nil && !os.IsPermission(err) {\n" +
			"\t\t// Knotless: without CAP_SYS_RESOURCE the shim keeps its inherited score.\n" +
			"\t\treturn shim.BootstrapParams{}, fmt.Errorf(\"failed to set OOM Score on shim: %w\", err)\n" +
			"\t}\n",
		count: 1,
	},
}

// patchRunscShim applies runscShimEdits to the gVisor source at root and
// adds the knotlessPlainAddress helper.
func patchRunscShim(root string) error {
	if err := applyEdits(root, runscShimEdits); err != nil {
		return fmt.Errorf("patch containerd-shim-runsc-v1: %w", err)
	}
	helper := filepath.Join(root, filepath.FromSlash(runscShimBootstrapFile))
	if _, err := os.Stat(helper); err == nil {
		return fmt.Errorf("patch containerd-shim-runsc-v1: %s exists already (patched twice?)", runscShimBootstrapFile)
	}
	if err := os.WriteFile(helper, []byte(runscShimBootstrapSource), 0o644); err != nil {
		return fmt.Errorf("patch containerd-shim-runsc-v1: add %s: %w", runscShimBootstrapFile, err)
	}
	return nil
}
