package errata

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"math/big"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/stretchr/testify/assert"
)

// fixtureFiles returns the files of the errata fixtures whose paths match,
// by fixture and path.
func fixtureFiles(tb testing.TB, match func(name string) bool) map[string]map[string][]byte {
	tb.Helper()
	fixtures, err := os.ReadDir(filepath.Join("testdata", "errata"))
	if err != nil || len(fixtures) == 0 {
		tb.Fatalf("no errata fixtures: %v", err)
	}
	out := map[string]map[string][]byte{}
	for _, fixture := range fixtures {
		root := errataFixture(fixture.Name())
		err := fs.WalkDir(root, ".", func(name string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !match(name) {
				return err
			}
			data, err := fs.ReadFile(root, name)
			if err != nil {
				return err
			}
			if out[fixture.Name()] == nil {
				out[fixture.Name()] = map[string][]byte{}
			}
			out[fixture.Name()][name] = data
			return nil
		})
		if err != nil {
			tb.Fatal(err)
		}
	}
	return out
}

// liveFile returns a file of this machine's, or nil where it has none or
// cannot read it.
func liveFile(name string) []byte {
	data, err := os.ReadFile(name)
	if err != nil {
		return nil
	}
	return data
}

// isArchTimerRef is isArchTimer said another way: the list, NUL-framed,
// holds a framed arch timer string.
func isArchTimerRef(compatible []byte) bool {
	framed := "\x00" + string(compatible) + "\x00"
	return strings.Contains(framed, "\x00arm,armv7-timer\x00") || strings.Contains(framed, "\x00arm,armv8-timer\x00")
}

// FuzzCompatible: a compatible property names an arch timer exactly when
// one of its NUL-separated strings is one, wherever in the list, and
// whatever comes before or after it.
func FuzzCompatible(f *testing.F) {
	for _, files := range fixtureFiles(f, func(name string) bool { return path.Base(name) == "compatible" }) {
		for _, data := range files {
			f.Add(data)
		}
	}
	// Near misses.
	f.Add([]byte("arm,armv8-timer-foo\x00"))
	f.Add([]byte("arm,armv7-timerx"))
	f.Add([]byte("vendor,timer\x00xarm,armv7-timer\x00"))
	f.Fuzz(func(t *testing.T, compatible []byte) {
		got := isArchTimer(compatible)
		if got != isArchTimerRef(compatible) {
			t.Fatalf("isArchTimer(%q) = %v", compatible, got)
		}
		if got && (!isArchTimer(append([]byte("vendor,timer\x00"), compatible...)) || !isArchTimer(append(bytes.Clone(compatible), "\x00vendor,timer"...))) {
			t.Fatalf("isArchTimer(%q) = true, false with another string beside it", compatible)
		}
	})
}

// dtLayout builds a file system from a fuzzer's layout: one file a line,
// "path\tcontent" (content may hold NULs, not newlines). A path that is
// not valid, or that another path needs as a directory, is left out.
func dtLayout(layout []byte) fstest.MapFS {
	fsys := fstest.MapFS{}
	for line := range bytes.SplitSeq(layout, []byte("\n")) {
		name, content, _ := bytes.Cut(line, []byte("\t"))
		if fs.ValidPath(string(name)) && string(name) != "." {
			fsys[string(name)] = &fstest.MapFile{Data: content}
		}
	}
	for name := range fsys {
		for dir := path.Dir(name); dir != "."; dir = path.Dir(dir) {
			delete(fsys, dir)
		}
	}
	return fsys
}

// encodeLayout is dtLayout's inverse, for seeds (newlines in contents
// are dropped).
func encodeLayout(files map[string][]byte) []byte {
	var b bytes.Buffer
	for _, name := range slices.Sorted(maps.Keys(files)) {
		b.WriteString(name + "\t")
		b.Write(bytes.ReplaceAll(files[name], []byte("\n"), nil))
		b.WriteString("\n")
	}
	return b.Bytes()
}

// liveDeviceTree returns this machine's device tree as a layout (the
// first 2000 files), or nil where it has none.
func liveDeviceTree() []byte {
	files := map[string][]byte{}
	root := os.DirFS("/")
	_ = fs.WalkDir(root, "sys/firmware/devicetree/base", func(name string, d fs.DirEntry, err error) error {
		if err != nil || len(files) >= 2000 {
			return fs.SkipAll
		}
		if !d.IsDir() {
			if data, err := fs.ReadFile(root, name); err == nil {
				files[name] = data
			}
		}
		return nil
	})
	if len(files) == 0 {
		return nil
	}
	return encodeLayout(files)
}

// FuzzDeviceTree walks device trees built from the fuzzer's bytes and
// checks findArchTimerNode against a search of the whole map: the first
// device-tree root present is the one searched; its /timer when that is
// an arch timer, else the breadth-first first (shallowest, then in name
// order) arch timer node; an error wrapping fs.ErrNotExist when there is
// none.
func FuzzDeviceTree(f *testing.F) {
	for _, files := range fixtureFiles(f, func(name string) bool {
		return strings.HasPrefix(name, "proc/device-tree/") || strings.HasPrefix(name, "sys/firmware/devicetree/")
	}) {
		f.Add(encodeLayout(files))
	}
	if live := liveDeviceTree(); live != nil {
		f.Add(live)
	}
	f.Add([]byte("proc/device-tree/soc/timer@1\tarm,armv8-timer\x00\nproc/device-tree/soc/a/compatible\tarm,armv7-timer\nproc/device-tree/b/c/compatible\tx\x00arm,armv8-timer\x00\n"))
	// /timer, though another arch timer comes first in the walk.
	f.Add([]byte("proc/device-tree/a-timer/compatible\tarm,armv7-timer\x00\nproc/device-tree/timer/compatible\tarm,armv8-timer\x00\n"))
	// Both roots, the timer in the second only: the first is searched.
	f.Add([]byte("proc/device-tree/chosen/name\tchosen\x00\nsys/firmware/devicetree/base/timer/compatible\tarm,armv8-timer\x00\n"))
	f.Fuzz(func(t *testing.T, layout []byte) {
		fsys := dtLayout(layout)
		if len(fsys) > maxDTNodes/4 {
			return // the walk's bound would cut the search short
		}
		node, dtPath, err := findArchTimerNode(fsys)

		var dt string
		for _, root := range dtRoots {
			if _, err := fs.Stat(fsys, root); err == nil {
				dt = root
				break
			}
		}
		// The arch timer nodes under dt, in breadth-first order.
		var timers []string
		for name, file := range fsys {
			if dt != "" && strings.HasPrefix(name, dt+"/") && path.Base(name) == "compatible" && isArchTimerRef(file.Data) {
				timers = append(timers, path.Dir(name))
			}
		}
		slices.SortFunc(timers, func(a, b string) int {
			as, bs := strings.Split(a, "/"), strings.Split(b, "/")
			if len(as) != len(bs) {
				return len(as) - len(bs)
			}
			return slices.Compare(as, bs)
		})
		want := ""
		switch {
		case slices.Contains(timers, dt+"/timer"):
			want = dt + "/timer"
		case len(timers) > 0:
			want = timers[0]
		}

		if want == "" {
			if err == nil || !errors.Is(err, fs.ErrNotExist) {
				t.Fatalf("no arch timer under %q, yet findArchTimerNode gives %q, %q, %v", dt, node, dtPath, err)
			}
			return
		}
		if err != nil || node != want {
			t.Fatalf("arch timer nodes %q under %q: findArchTimerNode gives %q, %v; want %q", timers, dt, node, err, want)
		}
		if wantPath := "/" + strings.TrimPrefix(strings.TrimPrefix(node, dt), "/"); dtPath != wantPath {
			t.Fatalf("node %q under %q shown as %q, want %q", node, dt, dtPath, wantPath)
		}
	})
}

// hisiGTDTRef is hisiGTDT said another way: the signature (bytes 0:4)
// and the OEM id, table id and OEM revision (10:28) of a whole 36-byte
// ACPI header, compared with each table the kernel matches.
func hisiGTDTRef(table []byte) (string, bool) {
	if len(table) < 36 {
		return "", false
	}
	for _, id := range []string{"HIP05", "HIP06", "HIP07"} {
		want := []byte("GTDT??????HISI  " + id + "   \x00\x00\x00\x00")
		if bytes.Equal(table[:4], want[:4]) && bytes.Equal(table[10:28], want[10:28]) {
			return "HISI " + id, true
		}
	}
	return "", false
}

// FuzzGTDT: hisiGTDT reads the header and nothing else, and names the
// table exactly when its OEM fields are one the kernel matches.
func FuzzGTDT(f *testing.F) {
	for _, files := range fixtureFiles(f, func(name string) bool { return path.Base(name) == "GTDT" }) {
		for _, data := range files {
			f.Add(data)
		}
	}
	if live := liveFile("/sys/firmware/acpi/tables/GTDT"); live != nil {
		f.Add(live)
	}
	f.Add(gtdt("HISI  ", "HIP05   ", 0))
	// Near misses.
	f.Add(gtdt("HISI  ", "HIP07   ", 1))
	f.Add(gtdt("HISI  ", "HIP08   ", 0))
	f.Add(gtdt("HISI  ", "HIP06   ", 0)[:gtdtHeaderSize-1])
	f.Fuzz(func(t *testing.T, table []byte) {
		oem, ok := hisiGTDT(table)
		if wantOEM, wantOK := hisiGTDTRef(table); oem != wantOEM || ok != wantOK {
			t.Fatalf("hisiGTDT(%q) = %q, %v; want %q, %v", table, oem, ok, wantOEM, wantOK)
		}
		if len(table) >= gtdtHeaderSize {
			if oem2, ok2 := hisiGTDT(table[:gtdtHeaderSize]); oem2 != oem || ok2 != ok {
				t.Fatalf("hisiGTDT(%q) = %q, %v, but %q, %v on its header alone", table, oem, ok, oem2, ok2)
			}
		}
		// Detect reads the same file the same way.
		m := Detect(fstest.MapFS{"sys/firmware/acpi/tables/GTDT": {Data: table}})
		if (m.Erratum == HiSilicon161010101) != ok || ok && m.Where != "ACPI GTDT OEM "+oem || len(m.Unknown) != 0 {
			t.Fatalf("GTDT %q: hisiGTDT says %q, %v; Detect %+v", table, oem, ok, m)
		}
	})
}

// parseMIDRRef reads a hex number without strconv: white space around
// it, an optional "0x", then 1 or more hex digits worth less than 2^64.
func parseMIDRRef(content []byte) (uint64, bool) {
	s := strings.TrimPrefix(strings.TrimSpace(string(content)), "0x")
	if s == "" || strings.Trim(s, "0123456789abcdefABCDEF") != "" {
		return 0, false
	}
	n, _ := new(big.Int).SetString(s, 16)
	if n.BitLen() > 64 {
		return 0, false
	}
	return n.Uint64(), true
}

// FuzzMIDR: parseMIDR agrees with a reader that uses no strconv, inverts
// the kernel's writer, and findCortexA73 names a CPU exactly when its
// MIDR_EL1 is a Cortex-A73's (any variant and revision).
func FuzzMIDR(f *testing.F) {
	for _, files := range fixtureFiles(f, func(name string) bool { return path.Base(name) == "midr_el1" }) {
		for _, data := range files {
			f.Add(data)
		}
	}
	if live := liveFile("/sys/devices/system/cpu/cpu0/regs/identification/midr_el1"); live != nil {
		f.Add(live)
	}
	f.Fuzz(func(t *testing.T, content []byte) {
		midr, err := parseMIDR(content)
		if want, ok := parseMIDRRef(content); ok != (err == nil) || ok && midr != want {
			t.Fatalf("parseMIDR(%q) = %#x, %v; want %#x, %v", content, midr, err, want, ok)
		}
		if err != nil {
			midr = uint64(len(content)) * 0x9e3779b97f4a7c15 // any value, for the round trip
		}
		if back, err := parseMIDR(fmt.Appendf(nil, "0x%016x\n", midr)); err != nil || back != midr {
			t.Fatalf("%#x through the kernel's writer: %#x, %v", midr, back, err)
		}

		const file = "sys/devices/system/cpu/cpu3/regs/identification/midr_el1"
		where, err := findCortexA73(fstest.MapFS{file: {Data: content}})
		midr, parseErr := parseMIDR(content)
		switch {
		case parseErr != nil:
			if err == nil || !strings.HasPrefix(err.Error(), file+": ") {
				t.Fatalf("MIDR %q: parseMIDR says %v, findCortexA73 %q, %v", content, parseErr, where, err)
			}
		case err != nil:
			t.Fatalf("MIDR %q: %v", content, err)
		// The kernel keeps MIDR_EL1's low word (bits 63:32 are RES0):
		// implementer 0x41, architecture 0xf, part 0xd09.
		case uint32(midr)>>24 == 0x41 && uint32(midr)>>16&0xf == 0xf && uint32(midr)>>4&0xfff == 0xd09:
			if where != fmt.Sprintf("MIDR_EL1 %#x (cpu3)", midr) {
				t.Fatalf("A73 MIDR %#x: findCortexA73 says %q", midr, where)
			}
		case where != "":
			t.Fatalf("MIDR %#x is no A73, yet findCortexA73 says %q", midr, where)
		}
	})
}

// maxCPUInfoLine is the longest line bufio.Scanner reads: its buffer
// holds the line and its newline.
const maxCPUInfoLine = bufio.MaxScanTokenSize - 1

// cpuinfoCortexA73Ref is cpuinfoCortexA73 without a bufio.Scanner: it
// splits the file itself, and says a line too long for the scanner ends the search
// with an error.
func cpuinfoCortexA73Ref(cpuinfo []byte) (where string, tooLong bool) {
	lines := strings.Split(string(cpuinfo), "\n")
	if lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1] // no line after the last newline
	}
	var implementer, part string
	cpu := "?"
	for _, line := range lines {
		if len(line) > maxCPUInfoLine {
			return "", true
		}
		line = strings.TrimSuffix(line, "\r")
		key, value, ok := strings.Cut(line, ":")
		if !ok {
			implementer, part = "", ""
			continue
		}
		switch strings.TrimSpace(key) {
		case "processor":
			cpu = strings.TrimSpace(value)
		case "CPU implementer":
			implementer = strings.ToLower(strings.TrimSpace(value))
		case "CPU part":
			part = strings.ToLower(strings.TrimSpace(value))
		}
		if implementer == "0x41" && part == "0xd09" {
			return "/proc/cpuinfo: CPU implementer 0x41, part 0xd09 (processor " + cpu + ")", false
		}
	}
	return "", false
}

// TestCPUInfoScannerLimit holds the reference to the scanner's limit:
// lines at it and one past it, with and without a newline after them,
// before and after an A73. (Not fuzz seeds: the fuzzer spends its time
// minimizing inputs that long.)
func TestCPUInfoScannerLimit(t *testing.T) {
	a73 := "processor\t: 4\nCPU implementer\t: 0x41\nCPU part\t: 0xd09\n"
	for _, n := range []int{maxCPUInfoLine, maxCPUInfoLine + 1} {
		long := strings.Repeat("x", n)
		for _, cpuinfo := range []string{long + "\n" + a73, long + "\r\n" + a73, a73 + "\n" + long, long} {
			where, err := cpuinfoCortexA73([]byte(cpuinfo))
			wantWhere, tooLong := cpuinfoCortexA73Ref([]byte(cpuinfo))
			assert.Equal(t, wantWhere, where, "line of %d", n)
			assert.Equal(t, tooLong, err != nil, "line of %d: %v", n, err)
		}
	}
}

var cpuinfoWhere = regexp.MustCompile(`^/proc/cpuinfo: CPU implementer 0x41, part 0xd09 \(processor [^\n]*\)$`)

// FuzzCPUInfo: cpuinfoCortexA73 agrees with a reader that splits the
// file without bufio, reports a line too long for its scanner as an
// error, reads CRLF files as LF ones, and finds an A73 appended to a file
// in which it found none.
func FuzzCPUInfo(f *testing.F) {
	for _, files := range fixtureFiles(f, func(name string) bool { return name == "proc/cpuinfo" }) {
		for _, data := range files {
			f.Add(data)
		}
	}
	// A real x86 file (testdata/cpuinfo/README.md says where from).
	recorded, err := os.ReadFile(filepath.Join("testdata", "cpuinfo", "x86-64-kvm-guest"))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(recorded)
	if live := liveFile("/proc/cpuinfo"); live != nil {
		f.Add(live)
	}
	f.Add([]byte("processor\t: 7\r\nCPU implementer\t: 0X41\r\nCPU part\t: 0xD09\r\n"))
	// A line one byte too long for the scanner, before an A73.
	f.Add([]byte(strings.Repeat("x", maxCPUInfoLine+1) + "\nprocessor\t: 4\nCPU implementer\t: 0x41\nCPU part\t: 0xd09\n"))
	f.Fuzz(func(t *testing.T, cpuinfo []byte) {
		where, err := cpuinfoCortexA73(cpuinfo)
		wantWhere, tooLong := cpuinfoCortexA73Ref(cpuinfo)
		if where != wantWhere || (err != nil) != tooLong {
			t.Fatalf("cpuinfoCortexA73(%q) = %q, %v; want %q (line too long: %v)", cpuinfo, where, err, wantWhere, tooLong)
		}
		if err != nil {
			if !errors.Is(err, bufio.ErrTooLong) {
				t.Fatalf("cpuinfoCortexA73: %v, not a line too long", err)
			}
			return
		}
		if where != "" && !cpuinfoWhere.MatchString(where) {
			t.Fatalf("cpuinfoCortexA73(%q) = %q", cpuinfo, where)
		}
		if len(cpuinfo) < maxCPUInfoLine/2 {
			crlf := bytes.ReplaceAll(cpuinfo, []byte("\n"), []byte("\r\n"))
			if got, err := cpuinfoCortexA73(crlf); got != where || err != nil {
				t.Fatalf("cpuinfoCortexA73(%q) = %q, but %q, %v with CRLF", cpuinfo, where, got, err)
			}
		}
		if where == "" {
			more := append(bytes.Clone(cpuinfo), "\n\nprocessor\t: 99\nCPU implementer\t: 0x41\nCPU part\t: 0xd09\n"...)
			if got, err := cpuinfoCortexA73(more); got != "/proc/cpuinfo: CPU implementer 0x41, part 0xd09 (processor 99)" || err != nil {
				t.Fatalf("cpuinfoCortexA73(%q) = %q, %v after an A73 was appended", cpuinfo, got, err)
			}
		}
	})
}
