// Command kube is one binary holding every program of the test cluster:
// kube-apiserver, kube-controller-manager, kube-scheduler, kubelet,
// kube-proxy, kubectl and etcd, and kwok (kwok.go: the scale benchmark's
// fake nodes, test/kwok). It picks the program by the base name it was
// started as (hyperkube style), or by its first argument:
//
//	kube kubelet --config=...   # same as a link named kubelet
//
// It is built by the harness (`cluster build`) with version ldflags, never by
// the product's module: k8s.io/kubernetes stays out of knotless.dev/knotless.
package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	_ "time/tzdata" // CronJob time zones, as the upstream mains do

	"github.com/spf13/cobra"
	"go.etcd.io/etcd/server/v3/etcdmain"
	"k8s.io/component-base/cli"
	"k8s.io/component-base/logs"
	_ "k8s.io/component-base/logs/json/register"
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version"
	kubectl "k8s.io/kubectl/pkg/cmd"
	kubectlutil "k8s.io/kubectl/pkg/cmd/util"
	apiserver "k8s.io/kubernetes/cmd/kube-apiserver/app"
	controllermanager "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	proxy "k8s.io/kubernetes/cmd/kube-proxy/app"
	scheduler "k8s.io/kubernetes/cmd/kube-scheduler/app"
	kubelet "k8s.io/kubernetes/cmd/kubelet/app"
)

// programs maps a program name to a function that runs it with os.Args and
// returns the process exit code.
var programs = map[string]func() int{
	"kube-apiserver":          func() int { return cli.Run(apiserver.NewAPIServerCommand()) },
	"kube-controller-manager": func() int { return cli.Run(controllermanager.NewControllerManagerCommand()) },
	"kube-scheduler":          func() int { return cli.Run(scheduler.NewSchedulerCommand()) },
	"kubelet":                 func() int { return cli.Run(kubelet.NewKubeletCommand(context.Background())) },
	"kube-proxy":              func() int { return cli.Run(proxy.NewProxyCommand()) },
	"kubectl":                 runKubectl,
	"etcd":                    func() int { etcdmain.Main(os.Args); return 0 },
	"kwok":                    runKwok,
}

func runKubectl() int {
	logs.GlogSetter(kubectl.GetLogVerbosity(os.Args)) //nolint:errcheck
	var command *cobra.Command = kubectl.NewDefaultKubectlCommand()
	if err := cli.RunNoErrOutput(command); err != nil {
		kubectlutil.CheckErr(err)
	}
	return 0
}

func main() {
	name := filepath.Base(os.Args[0])
	if _, ok := programs[name]; !ok && len(os.Args) > 1 {
		// `kube PROGRAM ARGS...`: drop our own name so the program sees
		// itself as argv[0].
		name = os.Args[1]
		os.Args = os.Args[1:]
	}
	run, ok := programs[name]
	if !ok {
		names := make([]string, 0, len(programs))
		for n := range programs {
			names = append(names, n)
		}
		sort.Strings(names)
		fmt.Fprintf(os.Stderr, "usage: kube PROGRAM [ARGS...], or run it through a link named PROGRAM\nprograms: %s\n", strings.Join(names, ", "))
		os.Exit(2)
	}
	os.Exit(run())
}
