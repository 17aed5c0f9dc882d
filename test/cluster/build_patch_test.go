package cluster

import (
	"context"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// moduleSource returns a writable copy of module@version from the module
// proxy (or the module cache), removed at the end of the test.
func moduleSource(t *testing.T, module, version string) string {
	t.Helper()
	o, _ := testOptions(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	dir, cleanup, err := moduleCopy(ctx, o, module, version)
	if err != nil {
		t.Fatalf("copy %s@%s: %v", module, version, err)
	}
	t.Cleanup(cleanup)
	return dir
}

func readSource(t *testing.T, root, file string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(file)))
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// parseDir fails the test when a Go file of the directory does not parse.
func parseDir(t *testing.T, dir string) {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no Go files in %s: %v", dir, err)
	}
	for _, f := range files {
		if _, err := parser.ParseFile(token.NewFileSet(), f, nil, parser.SkipObjectResolution); err != nil {
			t.Errorf("patched source does not parse: %v", err)
		}
	}
}

func TestPatchNetworkPolicies_RealModuleQueuesThroughXtablesAndReadsKubeconfig(t *testing.T) {
	src := moduleSource(t, NetworkPoliciesModule, NetworkPoliciesVersion)
	if err := patchNetworkPolicies(src); err != nil {
		t.Fatalf("patch: %v", err)
	}
	controller := readSource(t, src, "pkg/networkpolicy/controller.go")
	if n := strings.Count(controller, "queue := knotlessNFQueue(uint16(c.config.QueueID), c.config.FailOpen)"); n != 2 {
		t.Errorf("controller.go: %d knotlessNFQueue uses, want 2", n)
	}
	dnsagent := readSource(t, src, "pkg/networkpolicy/dnsagent.go")
	if !strings.Contains(dnsagent, "knotlessNFQueue(uint16(n.nfQueueID), true),") {
		t.Error("dnsagent.go: queue expression not replaced")
	}
	for name, text := range map[string]string{"controller.go": controller, "dnsagent.go": dnsagent} {
		if strings.Contains(text, "expr.Queue") {
			t.Errorf("%s still uses expr.Queue", name)
		}
	}
	helper := readSource(t, src, nfqueueHelperFile)
	for _, want := range []string{`Name: "NFQUEUE", Rev: 3`, "xt.Unknown"} {
		if !strings.Contains(helper, want) {
			t.Errorf("helper lacks %q", want)
		}
	}
	main := readSource(t, src, "cmd/main.go")
	for _, want := range []string{
		`"k8s.io/client-go/tools/clientcmd"`,
		`os.Getenv("KUBECONFIG")`,
		`clientcmd.BuildConfigFromFlags("", kubeconfig)`,
		"rest.InClusterConfig()",
	} {
		if !strings.Contains(main, want) {
			t.Errorf("cmd/main.go lacks %s", want)
		}
	}
	parseDir(t, filepath.Join(src, "pkg", "networkpolicy"))
	parseDir(t, filepath.Join(src, "cmd"))
	// The helper's imports must be in the module's requirements at the pinned
	// version, whose xt package has Unknown.
	gomod := readSource(t, src, "go.mod")
	if !strings.Contains(gomod, "github.com/google/nftables v0.3.0") {
		t.Errorf("kube-network-policies no longer pins github.com/google/nftables v0.3.0; check xt.Unknown there")
	}
}

func TestPatchNetworkPolicies_FailsWhenUpstreamChangedASnippet(t *testing.T) {
	src := moduleSource(t, NetworkPoliciesModule, NetworkPoliciesVersion)
	path := filepath.Join(src, "pkg", "networkpolicy", "dnsagent.go")
	text := readSource(t, src, "pkg/networkpolicy/dnsagent.go")
	changed := strings.Replace(text, "&expr.Queue{Num: uint16(n.nfQueueID), Flag: expr.QueueFlagBypass}",
		"&expr.Queue{Num: uint16(n.nfQueueID)}", 1)
	if err := os.WriteFile(path, []byte(changed), 0o644); err != nil {
		t.Fatal(err)
	}
	err := patchNetworkPolicies(src)
	if err == nil || !strings.Contains(err.Error(), "dnsagent.go") || !strings.Contains(err.Error(), "found 0 times") {
		t.Fatalf("patch of a changed dnsagent.go: err = %v, want one naming the file and the missing snippet", err)
	}
}

func TestPatchNetworkPolicies_FailsOnANewQueueExpression(t *testing.T) {
	src := moduleSource(t, NetworkPoliciesModule, NetworkPoliciesVersion)
	extra := "package networkpolicy\n\nimport \"github.com/google/nftables/expr\"\n\nvar _ = &expr.Queue{Num: 7}\n"
	if err := os.WriteFile(filepath.Join(src, "pkg", "networkpolicy", "newfeature.go"), []byte(extra), 0o644); err != nil {
		t.Fatal(err)
	}
	err := patchNetworkPolicies(src)
	if err == nil || !strings.Contains(err.Error(), "pkg/networkpolicy/newfeature.go") {
		t.Fatalf("patch with an unpatched queue expression: err = %v, want one naming newfeature.go", err)
	}
}

// The patched CoreDNS imports exactly CoreDNSPlugins and orders exactly
// their directives, in upstream's order; forward is gone from both.
func TestPatchCoreDNS_RealModuleKeepsOnlyTheCorefilesPlugins(t *testing.T) {
	src := moduleSource(t, CoreDNSModule, CoreDNSVersion)
	before := readSource(t, src, "core/dnsserver/zdirectives.go")
	if err := patchCoreDNS(src); err != nil {
		t.Fatalf("patch: %v", err)
	}
	plugins := readSource(t, src, "core/plugin/zplugin.go")
	directives := readSource(t, src, "core/dnsserver/zdirectives.go")
	if strings.Contains(plugins, "plugin/forward") {
		t.Error("zplugin.go still imports the forward plugin")
	}
	if strings.Contains(directives, `"forward"`) {
		t.Error("zdirectives.go still lists the forward directive")
	}
	if n := strings.Count(plugins, "\t_ \""); n != len(CoreDNSPlugins) {
		t.Errorf("zplugin.go imports %d plugins, want %d (%v):\n%s", n, len(CoreDNSPlugins), CoreDNSPlugins, plugins)
	}
	for _, p := range CoreDNSPlugins {
		if !strings.Contains(plugins, "plugin/"+p+"\"") {
			t.Errorf("zplugin.go lost %s", p)
		}
		if !strings.Contains(directives, `"`+p+`",`) {
			t.Errorf("zdirectives.go lost %s", p)
		}
	}
	for i, p := range CoreDNSPlugins {
		for _, q := range CoreDNSPlugins[i+1:] {
			a, b := strings.Index(directives, `"`+p+`",`), strings.Index(directives, `"`+q+`",`)
			if (a < b) != (strings.Index(before, `"`+p+`",`) < strings.Index(before, `"`+q+`",`)) {
				t.Errorf("zdirectives.go changed the order of %s and %s", p, q)
			}
		}
	}
	parseDir(t, filepath.Join(src, "core", "plugin"))
	parseDir(t, filepath.Join(src, "core", "dnsserver"))
}

func TestPatchCoreDNS_FailsWhenAppliedTwice(t *testing.T) {
	src := moduleSource(t, CoreDNSModule, CoreDNSVersion)
	if err := patchCoreDNS(src); err != nil {
		t.Fatalf("first patch: %v", err)
	}
	err := patchCoreDNS(src)
	if err == nil || !strings.Contains(err.Error(), "zplugin.go") {
		t.Fatalf("second patch: err = %v, want one naming zplugin.go", err)
	}
}

// nfqueueProofTest runs inside a copy of kube-network-policies, so it uses
// the nftables and go-nfqueue versions that module pins. It exercises the
// helper we inject (same source, package renamed): a rule with the NFQUEUE
// target is accepted, a packet really arrives on the queue, and with the
// bypass flag and no listener the packet passes.
const nfqueueProofTest = `package knotlessproof

import (
	"context"
	"net"
	"os"
	"os/exec"
	"testing"
	"time"

	nfqueue "github.com/florianl/go-nfqueue"
	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

const queueNum = 4242

func addRule(t *testing.T, table string, port uint16, target expr.Any) {
	c, err := nftables.New()
	if err != nil {
		t.Fatal(err)
	}
	tb := c.AddTable(&nftables.Table{Family: nftables.TableFamilyINet, Name: table})
	ch := c.AddChain(&nftables.Chain{Name: "out", Table: tb, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookOutput, Priority: nftables.ChainPriorityFilter})
	c.AddRule(&nftables.Rule{Table: tb, Chain: ch, Exprs: []expr.Any{
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.IPPROTO_UDP}},
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binaryutil.BigEndian.PutUint16(port)},
		&expr.Counter{},
		target,
	}})
	if err := c.Flush(); err != nil {
		t.Fatalf("add rule with %#v: %v", target, err)
	}
	t.Cleanup(func() {
		c, _ := nftables.New()
		c.DelTable(tb)
		_ = c.Flush()
	})
	if out, err := exec.Command("nft", "list", "table", "inet", table).CombinedOutput(); err == nil {
		t.Logf("nft list table inet %s:\n%s", table, out)
	}
	rules, err := c.GetRules(tb, ch)
	if err != nil || len(rules) != 1 {
		t.Fatalf("list rules back: %d rules, %v", len(rules), err)
	}
	tg, ok := rules[0].Exprs[len(rules[0].Exprs)-1].(*expr.Target)
	if !ok || tg.Name != "NFQUEUE" || tg.Rev != 3 {
		t.Fatalf("rule read back ends with %#v, want the NFQUEUE target rev 3", rules[0].Exprs[len(rules[0].Exprs)-1])
	}
}

// udpPair returns a UDP socket on loopback and its port.
func udpPair(t *testing.T) (*net.UDPConn, uint16) {
	ln, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln, uint16(ln.LocalAddr().(*net.UDPAddr).Port)
}

// send sends msg over loopback to ln and returns what ln received within
// wait ("" when nothing arrived).
func send(t *testing.T, ln *net.UDPConn, msg string, wait time.Duration) string {
	conn, err := net.DialUDP("udp4", nil, ln.LocalAddr().(*net.UDPAddr))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte(msg)); err != nil {
		t.Fatal(err)
	}
	_ = ln.SetReadDeadline(time.Now().Add(wait))
	buf := make([]byte, 64)
	n, _, err := ln.ReadFromUDP(buf)
	if err != nil {
		return ""
	}
	return string(buf[:n])
}

func TestNFQueueTarget_PacketsReachTheQueue(t *testing.T) {
	ln, port := udpPair(t)
	addRule(t, "knotless-nfq-proof-"+itoa(os.Getpid()), port, knotlessNFQueue(queueNum, false))

	nf, err := nfqueue.Open(&nfqueue.Config{NfQueue: queueNum, MaxPacketLen: 128, MaxQueueLen: 16,
		Copymode: nfqueue.NfQnlCopyPacket, WriteTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer nf.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	queued := make(chan struct{}, 4)
	err = nf.RegisterWithErrorFunc(ctx, func(a nfqueue.Attribute) int {
		queued <- struct{}{} // before the verdict: the datagram arrives right after it
		_ = nf.SetVerdict(*a.PacketID, nfqueue.NfAccept)
		return 0
	}, func(error) int { return 0 })
	if err != nil {
		t.Fatal(err)
	}
	if got := send(t, ln, "queued", 5*time.Second); got != "queued" {
		t.Errorf("datagram through the queue: received %q, want %q", got, "queued")
	}
	select {
	case <-queued:
	default:
		t.Error("the datagram was delivered without passing through the queue")
	}
}

func TestNFQueueTarget_BypassPassesWithoutListener(t *testing.T) {
	ln, port := udpPair(t)
	addRule(t, "knotless-nfq-bypass-"+itoa(os.Getpid()), port, knotlessNFQueue(queueNum+1, true))
	if got := send(t, ln, "bypassed", 5*time.Second); got != "bypassed" {
		t.Errorf("datagram with bypass and no listener: received %q, want %q", got, "bypassed")
	}
}

func TestNFQueueTarget_NoBypassDropsWithoutListener(t *testing.T) {
	ln, port := udpPair(t)
	addRule(t, "knotless-nfq-drop-"+itoa(os.Getpid()), port, knotlessNFQueue(queueNum+2, false))
	if got := send(t, ln, "dropped", time.Second); got != "" {
		t.Errorf("datagram without bypass and no listener: received %q, want it dropped", got)
	}
}

func itoa(i int) string {
	b := []byte{}
	for ; i > 0; i /= 10 {
		b = append([]byte{byte('0' + i%10)}, b...)
	}
	return string(b)
}
`

// TestNFQueueTarget_WorksOnThisKernel proves patch (a): it needs root (it adds
// and removes its own nftables tables, matching only loopback UDP to a port
// it holds) and compiles a small package against the module's own pins.
func TestNFQueueTarget_WorksOnThisKernel(t *testing.T) {
	if testing.Short() {
		t.Skip("compiles nftables and go-nfqueue; skipped with -short")
	}
	if os.Geteuid() != 0 {
		machineSkipf(t, "needs root to change netfilter rules")
	}
	src := moduleSource(t, NetworkPoliciesModule, NetworkPoliciesVersion)
	if err := patchNetworkPolicies(src); err != nil {
		t.Fatalf("patch: %v", err)
	}
	proof := filepath.Join(src, "knotlessproof")
	if err := os.MkdirAll(proof, 0o755); err != nil {
		t.Fatal(err)
	}
	helper := strings.Replace(readSource(t, src, nfqueueHelperFile), "package networkpolicy", "package knotlessproof", 1)
	if err := os.WriteFile(filepath.Join(proof, "helper.go"), []byte(helper), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(proof, "proof_test.go"), []byte(nfqueueProofTest), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "test", "-count=1", "-v", "./knotlessproof")
	cmd.Dir = src
	cmd.Env = buildEnv(false)
	out, err := cmd.CombinedOutput()
	t.Logf("go test ./knotlessproof in the patched kube-network-policies:\n%s", out)
	if err != nil {
		t.Fatalf("NFQUEUE proof failed: %v", err)
	}
}

// machineSkipf skips t for something this machine lacks, or fails it with
// KNOTLESS_TEST_MACHINE_REQUIRED=1 (make test): internal/testenv.Skipf's
// rule, which this module cannot import.
func machineSkipf(t testing.TB, format string, args ...any) {
	t.Helper()
	if os.Getenv("KNOTLESS_TEST_MACHINE_REQUIRED") == "1" {
		t.Fatalf(format+" (KNOTLESS_TEST_MACHINE_REQUIRED=1: this machine must be able to run this test)", args...)
	}
	t.Skipf(format, args...)
}
