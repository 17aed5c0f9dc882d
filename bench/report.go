package main

import (
	"fmt"
	"io"
)

// printReport writes rep as tables for people.
func printReport(w io.Writer, rep Report) {
	m := rep.Machine
	fmt.Fprintf(w, "\nKnotless benchmarks, %s, source %s\n", m.Date, m.Commit)
	fmt.Fprintf(w, "machine: %d CPUs (nproc), %s, %d MiB RAM, %s, kernel %s, %s, git %s; load average at start %s\n",
		m.CPUs, m.CPUModel, m.MemoryMiB, m.OS, m.Kernel, m.Go, m.Git, m.Load)

	if p := rep.Push; p != nil {
		fmt.Fprintf(w, "\n1. Push to first step started: one shell runner (capacity 1) idle in its long poll,\n"+
			"   %d pushes of a new commit, one at a time, after %d warm-up push\n", p.Runs, p.Warmup)
		fmt.Fprintf(w, "   %-36s %10s %10s %10s %10s\n", "from the start of git push to", "median", "p90", "min", "max")
		row := func(name string, s Summary) {
			fmt.Fprintf(w, "   %-36s %7.1f ms %7.1f ms %7.1f ms %7.1f ms\n", name, s.Median, s.P90, s.Min, s.Max)
		}
		row("git push returned", p.Push)
		row("run queued (server clock, ms)", p.Queued)
		row("first step's process started", p.FirstStep)
		row("run succeeded (server clock, ms)", p.Succeeded)
		fmt.Fprintf(w, "   first step / git push (medians, this invocation): %.2f× (target ≤ 1.5×: %s)\n",
			p.Ratio, verdict(p.Ratio <= 1.5))
	}

	if l := rep.Log; l != nil {
		fmt.Fprintf(w, "\n2. Log throughput runner → server: a step prints %d MB (10^6 bytes) in 100-byte lines;\n"+
			"   runner --log-limit %s; from the step's start to the run succeeded with the whole log stored\n", l.MB, l.LogLimit)
		fmt.Fprintf(w, "   %-8s %14s %12s %18s %8s %14s\n", "run", "bytes stored", "step ran", "start → succeeded", "MB/s", "then exec")
		for i, r := range l.Runs {
			fmt.Fprintf(w, "   %-8d %14d %9.0f ms %15.0f ms %8.1f %11.0f ms\n", i+1, r.Bytes, r.StepMs, r.TotalMs, r.MBps, r.ExecMs)
		}
		fmt.Fprintf(w, "   %-8s %14s %12s %18s %8.1f\n", "median", "", "", "", l.MedianMBps)
		fmt.Fprintf(w, "   for reference (median of %d, into /dev/null): the step's pipeline alone %.1f MB/s,\n"+
			"   knotless-run exec of the same workflow (no server; whole process; one right after each run) %.1f MB/s\n",
			len(l.Runs), l.GeneratorMBps, l.ExecMBps)
		fmt.Fprintf(w, "   to the server / knotless-run exec (medians, this invocation): %.2f× (target ≥ 0.8×: %s);\n"+
			"   every run's log read back whole: every byte stored, in order\n", l.Ratio, verdict(l.Ratio >= 0.8))
	}

	if st := rep.Steps; st != nil {
		fmt.Fprintf(w, "\n3. Cost of a step: runs of 1 and of %d steps of `true`, %d of each, in turns; a run's\n"+
			"   duration is from its start to its result recorded (server clock)\n", st.Steps, st.Runs)
		fmt.Fprintf(w, "   %-36s %10s %10s %10s %10s\n", "", "median", "p90", "min", "max")
		row := func(name string, s Summary) {
			fmt.Fprintf(w, "   %-36s %7.1f ms %7.1f ms %7.1f ms %7.1f ms\n", name, s.Median, s.P90, s.Min, s.Max)
		}
		row("run of 1 step", st.One)
		row(fmt.Sprintf("run of %d steps", st.Steps), st.Many)
		fmt.Fprintf(w, "   per extra step (difference of the medians / %d): %.1f ms\n", st.Steps-1, st.PerStepMs)
	}

	if r := rep.Restart; r != nil {
		fmt.Fprintf(w, "\n4. Runner restart: a step prints a line every 20 ms; the runner is killed (SIGKILL) and\n"+
			"   started again, %d times; from the new process's start to the first byte past what the\n"+
			"   killed one had written\n", r.Restarts)
		fmt.Fprintf(w, "   %-36s %10s %10s %10s %10s\n", "", "median", "p90", "min", "max")
		row := func(name string, s Summary) {
			fmt.Fprintf(w, "   %-36s %7.1f ms %7.1f ms %7.1f ms %7.1f ms\n", name, s.Median, s.P90, s.Min, s.Max)
		}
		row("in the runner's spool", r.Spool)
		row("at the server", r.Server)
		fmt.Fprintf(w, "   target: median at the server ≤ 2 s: %s; the step's %d lines all stored once, in order\n",
			verdict(r.Server.Median <= 2000), r.Lines)
	}

	if d := rep.Idle; d != nil {
		what := "one server (claim wait %d s): the server process"
		if len(d.Replicas) > 0 {
			what = "the replicas (claim wait %d s): the replicas' processes, summed"
		}
		fmt.Fprintf(w, "\n5. %d idle runners long-polling "+what+"\n", d.Runners, d.Wait)
		row := func(name, rss, cpu string) { fmt.Fprintf(w, "   %-40s %12s %20s\n", name, rss, cpu) }
		row("", "RSS", "CPU (% of one core)")
		row(fmt.Sprintf("alone, no runners (%.0f s)", d.BaselineWindowS),
			fmt.Sprintf("%.1f MiB", mib(d.BaselineRSS)), fmt.Sprintf("%.2f %%", d.BaselineCPU))
		row(fmt.Sprintf("%d runners registered, none polling", d.Runners), fmt.Sprintf("%.1f MiB", mib(d.RegisteredRSS)), "")
		row(fmt.Sprintf("%d runners polling (%.0f s): peak", d.Runners, d.WindowS),
			fmt.Sprintf("%.1f MiB", mib(d.PeakRSS)), fmt.Sprintf("%.2f %%", d.CPU))
		row("  at the end of the window", fmt.Sprintf("%.1f MiB", mib(d.EndRSS)), "")
		row("VmHWM (highest since the server started)", fmt.Sprintf("%.1f MiB", mib(d.HWM)), "")
		fmt.Fprintf(w, "   %d polls answered and renewed in the window, %d errors; server threads %d;\n"+
			"   this program's own CPU (the %d clients, not counted above) %.2f%%\n",
			d.Answered, d.Errors, d.Threads, d.Runners, d.ClientCPU)
		printIdleReplicas(w, d)
	}
}

func verdict(ok bool) string {
	if ok {
		return "met"
	}
	return "missed"
}
