// Command startcost measures what one call of Now adds to a process's
// run: it builds testdata/weight/hello (a hello world without the
// package) and testdata/weight/hellonow (the same calling Now once),
// runs them interleaved, each in a process of its own, and prints the
// median wall time of each from fork to exit and the difference.
//
// Usage (from the repository root):
//
//	go run ./tools/startcost [-n 40]
//
// The programs are built with CGO_ENABLED=0 as TestWeight builds them;
// their output is discarded. The difference includes everything the
// import costs a process (its initialisation, the larger binary's page
// faults) and the call of Now itself.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"time"
)

func main() {
	runs := flag.Int("n", 40, "runs of each program")
	flag.Parse()
	dir, err := os.MkdirTemp("", "startcost")
	check(err)
	defer os.RemoveAll(dir)
	names := []string{"hello", "hellonow"}
	bins := make([]string, len(names))
	for i, name := range names {
		bins[i] = filepath.Join(dir, name)
		cmd := exec.Command("go", "build", "-o", bins[i], "./testdata/weight/"+name)
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		out, err := cmd.CombinedOutput()
		if err != nil {
			fmt.Fprintf(os.Stderr, "go build %s: %v\n%s", name, err, out)
			os.Exit(1)
		}
	}
	for _, bin := range bins {
		run(bin) // a first run of each puts its binary in the page cache
	}
	walls := make([][]time.Duration, len(bins))
	for range *runs {
		for i, bin := range bins {
			walls[i] = append(walls[i], run(bin))
		}
	}
	medians := make([]time.Duration, len(bins))
	for i, name := range names {
		slices.Sort(walls[i])
		medians[i] = walls[i][len(walls[i])/2]
		fmt.Printf("%-9s median %8.3f ms over %d runs (min %.3f, max %.3f)\n", name,
			ms(medians[i]), len(walls[i]), ms(walls[i][0]), ms(walls[i][len(walls[i])-1]))
	}
	fmt.Printf("one call of Now adds %+.3f ms per process (difference of the medians)\n", ms(medians[1]-medians[0]))
}

// run runs bin and returns its wall time from start to exit.
func run(bin string) time.Duration {
	start := time.Now()
	check(exec.Command(bin).Run())
	return time.Since(start)
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
