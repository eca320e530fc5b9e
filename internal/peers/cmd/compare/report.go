package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/debug"
	"strings"
	"time"

	"github.com/schedclock/schedclock/internal/measure"
)

// report prints the Markdown: a header that says where and how the
// figures were measured, the figures, notes, and the features table.
func report(w io.Writer, results []*result, floor readCost, cfg config, cpus [2]int, cpuErr error) {
	p := func(format string, args ...any) { fmt.Fprintf(w, format, args...) }

	p("### Clocks compared in one run\n\n")
	p("- CPU: %s\n", cpuDescription())
	p("- Go: %s %s/%s, GOMAXPROCS %d\n", runtime.Version(), runtime.GOOS, runtime.GOARCH, runtime.GOMAXPROCS(0))
	if cfg.load[0] != "" {
		p("- load average (1, 5, 15 min): %s at the start, %s at the end\n", cfg.load[0], cfg.load[1])
	}
	p("- command: `%s`\n", command())
	p("- modules: %s\n", moduleVersions())
	p("- ns/read: median of %d interleaved rounds of %v per clock (fastest-slowest round in brackets); every clock is called through a func value, and an empty func value costs %.1f ns here\n",
		cfg.rounds, cfg.benchtime, floor.median)
	p("- start-up: median of %d fresh processes: the clock's packages' init time (GODEBUG=inittrace=1) + its setup and first reading\n", cfg.startupRuns)
	p("- ppm: the clock's advance against %s over the interval, from one bracketed pairing (fastest of 200) at the start; ± is the bound the brackets give\n", rawName())
	switch {
	case cpuErr != nil:
		p("- handoffs: not run (%v)\n", cpuErr)
	case cfg.handoffs == 0:
		p("- handoffs: not run (-handoffs 0)\n")
	default:
		pinned := fmt.Sprintf("pinned to CPUs %d and %d", cpus[0], cpus[1])
		for _, r := range results {
			if r.checked && r.handoff.pinErr != nil {
				pinned = "not pinned: " + r.handoff.pinErr.Error()
				break
			}
		}
		p("- handoffs: 2 goroutines on 2 locked threads, %s; each loads what the other published, then reads the clock; a reading below the loaded value is a backward step\n", pinned)
	}
	p("\n")

	var ref float64
	for _, r := range results {
		if r.name == referenceClock && r.openErr == nil {
			ref = r.cost.median
		}
	}
	p("| clock | ns/read | x %s | start-up: init + first read |", referenceClock)
	for _, d := range cfg.drift {
		p(" ppm after %v |", d)
	}
	p(" backward steps / handoffs | largest step |\n")
	p("|---|---|---|---|")
	for range cfg.drift {
		p("---|")
	}
	p("---|---|\n")
	for _, r := range results {
		if r.openErr != nil {
			continue
		}
		p("| %s | %.1f (%.1f-%.1f) | %s | %s |", r.name, r.cost.median, r.cost.min, r.cost.max, ratio(r.cost.median, ref), startupCell(r))
		for _, d := range r.drift {
			p(" %+.2f ± %.2f |", d.ppm, d.plusMinus)
		}
		p(" %s | %s |\n", handoffCell(r), stepCell(r))
	}
	p("\n")

	for _, r := range results {
		if r.openErr != nil {
			p("- %s: not measured: %v\n", r.name, r.openErr)
		}
	}
	for _, r := range results {
		if r.note != nil {
			p("- %s\n", r.note())
		}
	}

	if cfg.features {
		p("\n| | %s |\n|---|", strings.Join(featureColumns, " | "))
		for range featureColumns {
			p("---|")
		}
		p("\n")
		for _, f := range features {
			p("| %s | %s |\n", f.name, strings.Join(f.cells, " | "))
		}
	}
}

func ratio(v, ref float64) string {
	if ref == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f", v/ref)
}

func startupCell(r *result) string {
	if r.startErr != nil {
		return "failed: " + r.startErr.Error()
	}
	init := short(r.startup.init)
	if len(r.pkgs) == 0 {
		init = "none"
	}
	return fmt.Sprintf("%s + %s", init, short(r.startup.first))
}

// short prints a duration with three significant digits, and 0 as "0".
func short(d time.Duration) string {
	if d == 0 {
		return "0"
	}
	return measure.Ns(float64(d))
}

func handoffCell(r *result) string {
	if !r.checked {
		return "-"
	}
	s := fmt.Sprintf("%d / %d", r.handoff.backwards, r.handoff.handoffs)
	if r.handoff.timedOut {
		s += fmt.Sprintf(" (stopped after %v)", r.handoff.elapsed.Round(time.Second))
	}
	return s
}

func stepCell(r *result) string {
	if !r.checked || r.handoff.backwards == 0 {
		return "-"
	}
	return short(time.Duration(r.handoff.maxStep))
}

// command is how to run this measurement again from the repository root.
func command() string {
	args := []string{"cd internal/peers && go run ./cmd/compare"}
	for _, a := range os.Args[1:] {
		if strings.ContainsAny(a, " \t'\"$*?") {
			a = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
		args = append(args, a)
	}
	return strings.Join(args, " ")
}

// moduleVersions lists the peer modules this binary was built with.
func moduleVersions() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	var mods []string
	for _, m := range info.Deps {
		switch {
		case m.Path == "github.com/schedclock/schedclock":
			mods = append(mods, m.Path+" (this tree)")
		case m.Path == "golang.org/x/sys", strings.HasPrefix(m.Path, "github.com/templexxx/cpu"):
			// not clocks
		default:
			mods = append(mods, m.Path+" "+m.Version)
		}
	}
	return strings.Join(mods, ", ")
}

// cpuDescription names the CPU, counts the CPUs, and says whether the
// system is virtualised and which clocksource its kernel uses.
func cpuDescription() string {
	model, virtual := "", false
	if f, err := os.Open("/proc/cpuinfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			key, value, ok := strings.Cut(sc.Text(), ":")
			if !ok {
				continue
			}
			key, value = strings.TrimSpace(key), strings.TrimSpace(value)
			switch {
			case model == "" && (key == "model name" || key == "Hardware"):
				model = value
			case key == "flags" && strings.Contains(" "+value+" ", " hypervisor "):
				virtual = true
			}
		}
		f.Close()
	}
	if model == "" {
		model = "unknown " + runtime.GOARCH + " CPU"
	}
	s := fmt.Sprintf("%s, %d logical CPUs", model, runtime.NumCPU())
	if virtual {
		s += ", virtual machine"
	}
	if cs, err := os.ReadFile("/sys/devices/system/clocksource/clocksource0/current_clocksource"); err == nil {
		s += ", kernel clocksource " + strings.TrimSpace(string(cs))
	}
	return s
}

// loadAverage is the system's load average over 1, 5 and 15 minutes, or
// "" where /proc/loadavg does not exist: on a shared machine it says how
// much the figures may be disturbed.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], ", ")
}
