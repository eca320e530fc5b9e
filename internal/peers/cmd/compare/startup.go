package main

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Start-up cost is measured in fresh child processes (this program,
// re-run with -startup-child), one clock per child:
//
//   - init: the "clock" time that GODEBUG=inittrace=1 reports for the
//     clock's packages, i.e. what importing them blocks the program for
//     before main runs;
//   - first read: how long main then waits for the clock's open (a New,
//     a base reading) and its first reading, on CLOCK_MONOTONIC_RAW.
//
// Every child links every peer, so every child runs every init; only the
// clock's own packages are counted. A clock that starts a background
// goroutine in init is charged only for the time init blocks.

// startupCost is the median over the runs of a clock's init time plus its
// first-read time, with both parts of that median run.
type startupCost struct {
	init, first time.Duration
}

func (s startupCost) total() time.Duration { return s.init + s.first }

// childMain runs in the child: it opens clock i, reads it once, and
// prints how long that took. It returns the exit status.
func childMain(rows []clock, i int) int {
	if i < 0 || i >= len(rows) {
		fmt.Fprintf(os.Stderr, "no clock %d\n", i)
		return 2
	}
	start := rawNow()
	read, err := rows[i].open()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	read()
	fmt.Printf("first %d\n", rawNow()-start)
	return 0
}

// inittraceLine matches "init PKG @T ms, C ms clock, ...".
var inittraceLine = regexp.MustCompile(`^init (\S+) @[0-9.]+ ms, ([0-9.]+) ms clock`)

// measureStartup runs one child per run for clock i.
func measureStartup(self string, row clock, i, runs int) (startupCost, error) {
	var costs []startupCost
	for range runs {
		cmd := exec.Command(self, "-startup-child", strconv.Itoa(i))
		cmd.Env = append(os.Environ(), "GODEBUG=inittrace=1")
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			return startupCost{}, fmt.Errorf("child: %v: %s", err, strings.TrimSpace(lastLine(stderr.String())))
		}
		var cost startupCost
		sc := bufio.NewScanner(&stderr)
		for sc.Scan() {
			m := inittraceLine.FindStringSubmatch(sc.Text())
			if m == nil || !slices.Contains(row.pkgs, m[1]) {
				continue
			}
			ms, err := strconv.ParseFloat(m[2], 64)
			if err != nil {
				return startupCost{}, err
			}
			cost.init += time.Duration(ms * float64(time.Millisecond))
		}
		var first int64
		if _, err := fmt.Sscanf(stdout.String(), "first %d", &first); err != nil {
			return startupCost{}, fmt.Errorf("child printed %q", stdout.String())
		}
		cost.first = time.Duration(first)
		costs = append(costs, cost)
	}
	slices.SortFunc(costs, func(a, b startupCost) int { return int(a.total() - b.total()) })
	return costs[len(costs)/2], nil
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return s[i+1:]
	}
	return s
}
