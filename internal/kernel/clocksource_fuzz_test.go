package kernel

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"
)

// clocksourceSeeds returns the pairs of files the fuzzer starts from:
// every fixture, and this machine's own when it has sysfs.
func clocksourceSeeds(tb testing.TB) [][2][]byte {
	tb.Helper()
	dirs, err := filepath.Glob(filepath.Join("testdata", "clocksource", "*"))
	if err != nil || len(dirs) == 0 {
		tb.Fatalf("no clocksource fixtures: %v", err)
	}
	dirs = append(dirs, filepath.Dir(ClocksourcePath))
	var seeds [][2][]byte
	for _, dir := range dirs {
		current, err := os.ReadFile(filepath.Join(dir, "current_clocksource"))
		if err != nil {
			continue // no sysfs here
		}
		available, _ := os.ReadFile(filepath.Join(dir, "available_clocksource"))
		seeds = append(seeds, [2][]byte{current, available})
	}
	return seeds
}

// space is white space as the parsers (strings.TrimSpace and
// strings.Fields) see it: Unicode's, of which sysfs writes the ASCII
// part (a clocksource's name holds none of it).
func space(r rune) bool { return unicode.IsSpace(r) }

// isSpaceOnly reports whether s is all white space.
func isSpaceOnly(s string) bool {
	return strings.IndexFunc(s, func(r rune) bool { return !space(r) }) < 0
}

// FuzzClocksource feeds the two sysfs files' contents to their parsers
// and to the Verdict built from them. The parsers must invert the
// kernel's writers (current_clocksource_show writes "%s\n",
// available_clocksource_show "%s " per name then "\n"), ignore the white
// space around names and nothing else, and split available_clocksource
// the same however it is cut at a space; the verdict must read the second
// file exactly when the first does not name the counter, and say what it
// read.
func FuzzClocksource(f *testing.F) {
	for _, seed := range clocksourceSeeds(f) {
		for _, want := range []string{"tsc", "arch_sys_counter", "kvm-clock"} {
			f.Add(seed[0], seed[1], want, true)
		}
		f.Add(seed[0], seed[1], "tsc", false)
	}
	f.Fuzz(func(t *testing.T, current, available []byte, want string, readable bool) {
		// current_clocksource: a name with no white space around it,
		// found in the file with only white space around it.
		cur := parseCurrent(current)
		if r, _ := utf8.DecodeRuneInString(cur); cur != "" && space(r) {
			t.Fatalf("parseCurrent(%q) = %q starts with white space", current, cur)
		}
		if r, _ := utf8.DecodeLastRuneInString(cur); cur != "" && space(r) {
			t.Fatalf("parseCurrent(%q) = %q ends with white space", current, cur)
		}
		if rest, ok := strings.CutPrefix(strings.TrimLeftFunc(string(current), space), cur); !ok || !isSpaceOnly(rest) {
			t.Fatalf("parseCurrent(%q) = %q: not the file less the white space around it", current, cur)
		}
		if got := parseCurrent([]byte(" \t" + cur + "\n")); got != cur {
			t.Fatalf("parseCurrent(%q) = %q, then %q after the kernel's writer", current, cur, got)
		}

		// available_clocksource: names without white space, each in
		// the file, in order, and only white space between them.
		names := parseAvailable(available)
		rest := string(available)
		for _, name := range names {
			if name == "" || strings.IndexFunc(name, space) >= 0 {
				t.Fatalf("parseAvailable(%q) gives the name %q", available, name)
			}
			after, ok := strings.CutPrefix(strings.TrimLeftFunc(rest, space), name)
			if r, _ := utf8.DecodeRuneInString(after); !ok || after != "" && !space(r) {
				t.Fatalf("parseAvailable(%q) = %q: %q is not the next name in %q", available, names, name, rest)
			}
			rest = after
		}
		if !isSpaceOnly(rest) {
			t.Fatalf("parseAvailable(%q) = %q leaves %q", available, names, rest)
		}
		var written strings.Builder
		for _, name := range names {
			written.WriteString(name + " ")
		}
		if got := parseAvailable([]byte(written.String() + "\n")); !slices.Equal(got, names) {
			t.Fatalf("parseAvailable(%q) = %q, then %q after the kernel's writer", available, names, got)
		}
		// Cut at the first 32 spaces and at the end (every space would
		// make a long input quadratic).
		for cut, cuts := 0, 0; cut <= len(available) && cuts < 33; cut++ {
			if cut < len(available) && available[cut] != ' ' {
				continue
			}
			cuts++
			if got := append(parseAvailable(available[:cut]), parseAvailable(available[cut:])...); !slices.Equal(got, names) {
				t.Fatalf("parseAvailable(%q) = %q, but %q cut at %d", available, names, got, cut)
			}
		}

		// The verdict.
		reads := 0
		v := verdictOf(want, current, func() ([]byte, error) {
			reads++
			if !readable {
				return nil, os.ErrPermission
			}
			return available, nil
		})
		if v.Want != want || v.Current != cur || !v.Known() {
			t.Fatalf("verdict %+v for want %q and current %q", v, want, cur)
		}
		if keep := cur == want; v.Keep() != keep || (reads == 0) != keep || reads > 1 {
			t.Fatalf("current %q, want %q: Keep %v after %d reads of available_clocksource", cur, want, v.Keep(), reads)
		}
		if wantAvailable := reads == 1 && readable; (v.Available != nil) != wantAvailable || !slices.Equal(v.Available, names) && wantAvailable {
			t.Fatalf("current %q, want %q, available %q (readable %v): Available %q", cur, want, names, readable, v.Available)
		}
		s := v.String()
		switch {
		case v.Keep():
			if s != "kernel clocksource is "+cur {
				t.Fatalf("%+v says %q", v, s)
			}
		case cur == "":
			if s != "kernel clocksource is empty, not "+want {
				t.Fatalf("%+v says %q", v, s)
			}
		case !strings.HasPrefix(s, "kernel clocksource is "+cur+", not "+want):
			t.Fatalf("%+v says %q", v, s)
		case v.Available != nil && slices.Contains(v.Available, want):
			if !strings.HasSuffix(s, " ("+want+" still available)") {
				t.Fatalf("%+v says %q", v, s)
			}
		case v.Available != nil:
			if !strings.HasSuffix(s, " ("+want+" not available: available are "+strings.Join(v.Available, " ")+")") {
				t.Fatalf("%+v says %q", v, s)
			}
		}
	})
}
