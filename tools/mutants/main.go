// Command mutants proves that the tests defend every safeguard of the read
// path: it copies the repository to a temporary directory, applies each
// mutation (a small textual edit of one file: a fence removed, a re-check
// deleted, a clamp dropped), runs the tests that should notice, and
// requires them to fail. It prints a table (mutation, killed or survived,
// the test that killed it) and exits non-zero if a mutation survives that
// is not documented as unobservable here, if a mutation's pattern no
// longer matches the code (a mutation that applies to nothing must not
// count as killed), if a mutant does not build, or if the unmutated tests
// fail.
//
// Usage (from the repository root; make mutants, make mutants-fast):
//
//	go run ./tools/mutants [-fast | -slow] [-only regexp] [-j n] [-v]
//
// -fast runs the read path's subset (MUTANTS=fast in the environment
// does the same); -slow the rest; make test-full runs both. -j runs n
// mutants at once, each in a copy of its own (a mutant's go test mostly
// compiles the mutated package, on one CPU). When the code a mutation edits changes, update its Old text:
// each pattern is kept to the one line or instruction it removes.
package main

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
	"time"
)

// edit replaces Old by New, exactly Count times, in a mutation's file.
type edit struct {
	Old, New string
	Count    int
}

type mutation struct {
	Name  string
	File  string
	Edits []edit
	// Arch is the GOARCH the tests run under: "" for the host (amd64 for
	// the TSC mutations), "arm64" for qemu-aarch64.
	Arch string
	// Run selects the tests that should kill the mutation (go test -run).
	Run string
	// Fast puts the mutation in the read path's subset (-fast).
	Fast bool
	// Unobservable, when set, says why no test can see the mutation on
	// the hardware at hand; it is still applied and run, and a survival
	// is reported as expected rather than failing the run.
	Unobservable string
	// Pkg is the package whose tests run, relative to the repository
	// root; "" is the root package.
	Pkg string
}

// The mutations are data, in mutations.json beside this file (a table of
// entries of one shape, which as Go code was one long repeated block).
// When the code a mutation edits moves or changes, update its File and
// Old text there (go run ./tools/mutants -check says which no longer
// apply). Texts holds the test regexps and reasons several mutations
// share: a Run or Unobservable that is a key of Texts stands for its text.
//
//go:embed mutations.json
var mutationsJSON []byte

var mutations = mustLoadMutations()

// mustLoadMutations decodes mutationsJSON, refusing fields a mutation does
// not have (a misspelt field would otherwise be silently empty).
func mustLoadMutations() []mutation {
	var f struct {
		Texts     map[string]string
		Mutations []mutation
	}
	dec := json.NewDecoder(bytes.NewReader(mutationsJSON))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		fmt.Fprintln(os.Stderr, "mutants: mutations.json:", err)
		os.Exit(2)
	}
	for i := range f.Mutations {
		m := &f.Mutations[i]
		for _, field := range []*string{&m.Run, &m.Unobservable} {
			if text, ok := f.Texts[*field]; ok {
				*field = text
			}
		}
	}
	return f.Mutations
}

type outcome struct {
	m        mutation
	status   string
	killedBy string
	evidence string
	failed   bool // counts against the run
	output   string
}

func main() {
	fast := flag.Bool("fast", os.Getenv("MUTANTS") == "fast", "run only the read path's subset")
	slow := flag.Bool("slow", false, "run only the mutations the read path's subset leaves out")
	only := flag.String("only", "", "run only the mutations whose name matches this regexp")
	verbose := flag.Bool("v", false, "print the test output of mutations that survive or fail to build")
	timeout := flag.Duration("timeout", 10*time.Minute, "limit for one go test run")
	jobs := flag.Int("j", 1, "mutants run at once, each in a copy of the tree of its own")
	flag.BoolVar(&failFast, "failfast", false, "stop a mutant's tests at its first failing test (go test -failfast): the table then names that test alone, and the other killers' evidence is not gathered")
	listOnly := flag.Bool("baseline-list", false, "the unmutated tree's tests just passed (as right after make qualify): check only that each mutation's -run selects a test (go test -list), instead of running them unmutated")
	check := flag.Bool("check", false, "only check that every mutation's edits apply to the tree (after code moved), running no test")
	flag.Parse()
	if *check {
		if err := checkPatterns(); err != nil {
			fmt.Fprintln(os.Stderr, "mutants:", err)
			os.Exit(1)
		}
		return
	}
	if *fast && *slow {
		fmt.Fprintln(os.Stderr, "mutants: -fast and -slow select disjoint sets; give one")
		os.Exit(2)
	}
	if *jobs < 1 {
		fmt.Fprintln(os.Stderr, "mutants: -j must be at least 1")
		os.Exit(2)
	}
	if err := run(*fast, *slow, *only, *verbose, *timeout, *jobs, *listOnly); err != nil {
		fmt.Fprintln(os.Stderr, "mutants:", err)
		os.Exit(1)
	}
}

func run(fast, slow bool, only string, verbose bool, timeout time.Duration, jobs int, listOnly bool) error {
	var sel []mutation
	onlyRE, err := regexp.Compile(only)
	if err != nil {
		return err
	}
	for _, m := range mutations {
		if (fast && !m.Fast) || (slow && m.Fast) || !onlyRE.MatchString(m.Name) {
			continue
		}
		sel = append(sel, m)
	}
	if len(sel) == 0 {
		return errors.New("no mutation selected")
	}
	root, err := repoRoot()
	if err != nil {
		return err
	}
	jobs = min(jobs, len(sel))
	works := make([]string, jobs)
	for i := range works {
		work, err := os.MkdirTemp("", "schedclock-mutants-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(work)
		if err := copyTree(root, work); err != nil {
			return err
		}
		works[i] = work
	}
	fmt.Printf("mutants: %d mutations, in %d copies at %s\n", len(sel), jobs, strings.Join(works, ", "))

	// The unmutated tests must pass, or a failure proves nothing: one run
	// per architecture and package, of every test the mutations select
	// (or, where the caller has just run them, a list of their names).
	start := time.Now()
	if err := baselines(works[0], sel, timeout, listOnly); err != nil {
		return err
	}
	fmt.Printf("mutants: baselines in %v\n", time.Since(start).Round(time.Second))

	results := make([]outcome, len(sel))
	next := make(chan int)
	var printing sync.Mutex
	var wg sync.WaitGroup
	for _, work := range works {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				o := apply(work, sel[i], timeout)
				results[i] = o
				printing.Lock()
				fmt.Printf("  %-50s %s\n", sel[i].Name, o.status)
				printing.Unlock()
			}
		}()
	}
	for i := range sel {
		next <- i
	}
	close(next)
	wg.Wait()

	fmt.Println()
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "MUTATION\tFILE\tARCH\tRESULT\tKILLED BY\tEVIDENCE")
	bad := 0
	for _, o := range results {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", o.m.Name, o.m.File, archName(o.m.Arch), o.status, o.killedBy, o.evidence)
		if o.failed {
			bad++
		}
	}
	tw.Flush()
	for _, o := range results {
		if counts := countLines(o.output); counts != "" {
			fmt.Printf("\n%s: what the tests saw:\n%s", o.m.Name, counts)
		}
	}
	for _, o := range results {
		if o.m.Unobservable != "" && strings.HasPrefix(o.status, "survived") {
			fmt.Printf("\n%s: not observable here: %s\n", o.m.Name, o.m.Unobservable)
		}
		if verbose && o.failed {
			fmt.Printf("\n--- output for %s:\n%s\n", o.m.Name, o.output)
		}
	}
	if bad > 0 {
		return fmt.Errorf("%d of %d mutations not killed or not applied (see the table)", bad, len(results))
	}
	return nil
}

// checkPatterns reports every mutation whose file is missing or whose
// edits do not occur as many times as they say, in the tree as it is.
func checkPatterns() error {
	root, err := repoRoot()
	if err != nil {
		return err
	}
	var bad []string
	for _, m := range mutations {
		orig, err := os.ReadFile(filepath.Join(root, m.File))
		if err != nil {
			bad = append(bad, fmt.Sprintf("%s: %v", m.Name, err))
			continue
		}
		for _, e := range m.Edits {
			if n := strings.Count(string(orig), e.Old); n != e.Count {
				bad = append(bad, fmt.Sprintf("%s (%s): %q occurs %d times, want %d", m.Name, m.File, e.Old, n, e.Count))
			}
		}
	}
	if len(bad) > 0 {
		return errors.New("patterns that no longer apply:\n" + strings.Join(bad, "\n"))
	}
	fmt.Printf("mutants: the edits of all %d mutations apply\n", len(mutations))
	return nil
}

// apply mutates m's file in the copy, runs its tests and restores it.
func apply(work string, m mutation, timeout time.Duration) outcome {
	o := outcome{m: m}
	if skip := archSkip(m.Arch); skip != "" {
		o.status = "not run: " + skip // said in the table, not a failure of this host
		return o
	}
	path := filepath.Join(work, m.File)
	orig, err := os.ReadFile(path)
	if err != nil {
		o.status, o.failed = "file missing: "+err.Error(), true
		return o
	}
	mutated := string(orig)
	for _, e := range m.Edits {
		if n := strings.Count(mutated, e.Old); n != e.Count {
			o.status, o.failed = fmt.Sprintf("PATTERN MISMATCH: %q occurs %d times, want %d", e.Old, n, e.Count), true
			return o
		}
		mutated = strings.ReplaceAll(mutated, e.Old, e.New)
	}
	if err := os.WriteFile(path, []byte(mutated), 0o644); err != nil {
		o.status, o.failed = err.Error(), true
		return o
	}
	defer os.WriteFile(path, orig, 0o644)

	start := time.Now()
	out, err := goTest(work, m, timeout, m.Unobservable != "") // -v: the passing tests' logs are the evidence
	o.output = out
	elapsed := time.Since(start).Round(time.Second)
	switch {
	case err == nil:
		if m.Unobservable != "" {
			o.status = "survived (expected)"
		} else {
			o.status, o.failed = "SURVIVED", true
		}
	case strings.Contains(out, "[build failed]") || strings.Contains(out, "[setup failed]") || strings.Contains(out, "vet:"):
		o.status, o.failed = "BUILD FAILED", true
	default:
		o.status = fmt.Sprintf("killed (%v)", elapsed)
		o.killedBy = failedTests(out)
		o.evidence = firstEvidence(out)
	}
	return o
}

// countRE matches the ordering tests' summaries: how many readings or
// handoffs they took and how many violations they saw.
var countRE = regexp.MustCompile(`(?m)^\s*\S+_test\.go:\d+: (.*(?:readings over|inversions in).*)$`)

// countLines returns the summaries in a go test output, one per line:
// those of the failing tests (go test prints no others without -v), and
// for a surviving mutation, run with -v, those of the hardware readers.
func countLines(out string) string {
	var b strings.Builder
	for _, m := range countRE.FindAllStringSubmatch(out, -1) {
		if strings.Contains(out, "\n=== RUN") && !strings.Contains(m[1], "smallest") && !strings.Contains(m[1], "/hw") && !strings.Contains(m[1], "unfenced") {
			continue
		}
		fmt.Fprintf(&b, "    %s\n", m[1])
	}
	return b.String()
}

var failRE = regexp.MustCompile(`(?m)^\s*--- FAIL: (\S+)`)

// failedTests lists the deepest failing tests of a go test output.
func failedTests(out string) string {
	var names []string
	for _, m := range failRE.FindAllStringSubmatch(out, -1) {
		names = append(names, m[1])
	}
	var leaves []string
	for _, n := range names {
		leaf := true
		for _, o := range names {
			if o != n && strings.HasPrefix(o, n+"/") {
				leaf = false
			}
		}
		if leaf {
			leaves = append(leaves, n)
		}
	}
	if len(leaves) == 0 {
		if strings.Contains(out, "panic: test timed out") {
			return "(timeout)"
		}
		return "(no test named)"
	}
	if len(leaves) > 2 {
		leaves = append(leaves[:2], fmt.Sprintf("(+%d)", len(leaves)-2))
	}
	return strings.Join(leaves, " ")
}

var (
	messagesRE = regexp.MustCompile(`(?m)^\s*Messages:\s+(.*)$`)
	errorRE    = regexp.MustCompile(`(?m)^\s*Error:\s+(.*)$`)
)

// firstEvidence returns the first assertion message of a go test output,
// or the first error when no assertion carried a message.
func firstEvidence(out string) string {
	m := messagesRE.FindStringSubmatch(out)
	if m == nil {
		m = errorRE.FindStringSubmatch(out)
	}
	if m == nil {
		return ""
	}
	s := strings.TrimSpace(m[1])
	if len(s) > 110 {
		s = s[:110] + "..."
	}
	return s
}

// baselines runs, unmutated, the tests each mutation of sel selects:
// the patterns of one architecture and package in one go test (a
// pattern with a slash, which go test would split, in one of its own),
// each required to select a test. With listOnly it runs none, and lists
// the top-level tests each pattern selects instead (go test -list).
func baselines(work string, sel []mutation, timeout time.Duration, listOnly bool) error {
	type group struct {
		m    mutation // its Arch and Pkg; Run the patterns joined
		runs []string
	}
	var groups []*group
	byKey := map[string]*group{}
	for _, m := range sel {
		if archSkip(m.Arch) != "" {
			continue
		}
		key := m.Arch + " " + m.Pkg
		if strings.Contains(m.Run, "/") {
			key += " " + m.Run
		}
		g := byKey[key]
		if g == nil {
			g = &group{m: mutation{Arch: m.Arch, Pkg: m.Pkg}}
			byKey[key] = g
			groups = append(groups, g)
		}
		if !slices.Contains(g.runs, m.Run) {
			g.runs = append(g.runs, m.Run)
		}
	}
	ran := regexp.MustCompile(`(?m)^=== RUN\s+(\S+)$`)
	listed := regexp.MustCompile(`(?m)^((?:Test|Fuzz|Example|Benchmark)\S*)$`)
	for _, g := range groups {
		g.m.Run = "(?:" + strings.Join(g.runs, ")|(?:") + ")"
		var names []string
		if listOnly {
			var tops []string
			for _, run := range g.runs {
				tops = append(tops, strings.SplitN(run, "/", 2)[0])
			}
			out, err := goList(work, g.m, "(?:"+strings.Join(tops, ")|(?:")+")")
			if err != nil {
				return fmt.Errorf("listing the tests (GOARCH=%s go test -list ./%s): %v\n%s", archName(g.m.Arch), g.m.Pkg, err, out)
			}
			for _, n := range listed.FindAllStringSubmatch(out, -1) {
				names = append(names, n[1])
			}
		} else {
			out, err := goTest(work, g.m, timeout, true) // -v: the names of the tests run
			if err != nil {
				return fmt.Errorf("the unmutated tests fail (GOARCH=%s go test -run %q ./%s): %v\n%s", archName(g.m.Arch), g.m.Run, g.m.Pkg, err, out)
			}
			for _, n := range ran.FindAllStringSubmatch(out, -1) {
				names = append(names, n[1])
			}
		}
		for _, run := range g.runs {
			top := regexp.MustCompile(strings.SplitN(run, "/", 2)[0])
			if !slices.ContainsFunc(names, top.MatchString) {
				return fmt.Errorf("-run %q selects no test", run)
			}
		}
	}
	return nil
}

// goList lists the top-level tests of m's package in dir that match
// pattern (go test -list), under m's architecture.
func goList(dir string, m mutation, pattern string) (string, error) {
	args := []string{"test", "-vet=off", "-list", pattern}
	env := os.Environ()
	if m.Arch != "" && m.Arch != runtime.GOARCH {
		args = append(args, "-exec", emulators[m.Arch])
		env = append(env, "GOARCH="+m.Arch)
	}
	pkg := "."
	if m.Pkg != "" {
		pkg = "./" + m.Pkg
	}
	cmd := exec.Command("go", append(args, pkg)...)
	cmd.Dir = dir
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// failFast makes a mutant's go test stop at its first failing test.
var failFast bool

// goTest runs m's tests in dir; verbose adds -v.
func goTest(dir string, m mutation, timeout time.Duration, verbose bool) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout+time.Minute)
	defer cancel()
	// -vet=off: go test's own vet pass costs each mutation a second, and
	// make lint vets the tree; a mutation is judged by its tests alone.
	args := []string{"test", "-count=1", "-vet=off", "-timeout", timeout.String(), "-run", m.Run}
	if verbose {
		args = append(args, "-v")
	}
	if failFast {
		args = append(args, "-failfast")
	}
	// The mutants are the qualification layer's: its tests (those that
	// need real hardware, load or long time) run too.
	env := append(os.Environ(), "SCHEDCLOCK_QUALIFY=1")
	if m.Arch != "" && m.Arch != runtime.GOARCH {
		args = append(args, "-exec", emulators[m.Arch])
		env = append(env, "GOARCH="+m.Arch)
	}
	pkg := "."
	if m.Pkg != "" {
		pkg = "./" + m.Pkg
	}
	args = append(args, pkg)
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = dir
	cmd.Env = env
	var buf bytes.Buffer
	cmd.Stdout, cmd.Stderr = &buf, &buf
	err := cmd.Run()
	return buf.String(), err
}

// archSkip says why mutations for arch cannot run here, or "".
func archSkip(arch string) string {
	switch {
	case arch == "" && runtime.GOARCH != "amd64":
		return "the TSC mutations need an amd64 host"
	case arch != "" && arch != runtime.GOARCH:
		if _, err := exec.LookPath(emulators[arch]); err != nil {
			return emulators[arch] + " not installed"
		}
	}
	return ""
}

// emulators names the user-mode qemu that runs each GOARCH's tests.
var emulators = map[string]string{
	"arm64":   "qemu-aarch64",
	"riscv64": "qemu-riscv64",
	"ppc64le": "qemu-ppc64le",
	"s390x":   "qemu-s390x",
	"loong64": "qemu-loongarch64",
}

func archName(arch string) string {
	if arch == "" {
		return runtime.GOARCH
	}
	return arch
}

func repoRoot() (string, error) {
	out, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		return "", fmt.Errorf("finding the repository root: %w", err)
	}
	return strings.TrimSpace(string(out)), nil
}

// copyTree copies the files git knows of (tracked, and untracked ones it
// does not ignore) from root to dst.
func copyTree(root, dst string) error {
	cmd := exec.Command("git", "ls-files", "-z", "--cached", "--others", "--exclude-standard")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("listing the repository's files: %w", err)
	}
	for _, name := range strings.Split(strings.TrimRight(string(out), "\x00"), "\x00") {
		src := filepath.Join(root, name)
		info, err := os.Lstat(src)
		if err != nil {
			if errors.Is(err, os.ErrNotExist) {
				continue // deleted in the working tree
			}
			return err
		}
		if !info.Mode().IsRegular() {
			continue
		}
		target := filepath.Join(dst, name)
		if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
			return err
		}
		if err := copyFile(src, target, info.Mode()); err != nil {
			return err
		}
	}
	return nil
}

func copyFile(src, dst string, mode os.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, mode.Perm())
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
