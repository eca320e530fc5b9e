// Package errata finds the arm64 counter errata the Linux kernel works
// around (drivers/clocksource/arm_arch_timer.c) in a file system laid out
// like the root one: the device tree's arch timer node, the ACPI GTDT's
// OEM, the CPUs' MIDR_EL1. And it holds the kernel's workaround reads,
// each on any raw read function, so that the clock applies them to its
// ordered CNTVCT_EL0 read and the tests to fake counters that glitch the
// way each erratum does.
package errata

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strconv"
	"strings"
)

// Some arm64 parts return wrong values from CNTVCT_EL0 now and then. The
// kernel (drivers/clocksource/arm_arch_timer.c, ool_workarounds[]) knows
// four that matter here, and for each replaces every counter read with a
// sequence that filters the wrong values out:
//
//   - Freescale/NXP A-008585 (LS1043A, LS1046A, LS2080A; device-tree
//     property "fsl,erratum-a008585" in the timer node): a read may return
//     a wrong value. __fsl_a008585_read_reg reads twice until both agree,
//     at most 200 times.
//   - HiSilicon 161010101 (Hip05, Hip06, Hip07; "hisilicon,erratum-161010101",
//     or on ACPI machines a GTDT whose OEM is HISI/HIP05..HIP07): a read
//     may be off by 32 or more. __hisi_161010101_read_reg reads twice until
//     the second is less than 32 past the first, at most 50 times.
//   - ARM 858921 (Cortex-A73, all versions, by MIDR: cpu_errata.c
//     ERRATA_MIDR_ALL_VERSIONS(MIDR_CORTEX_A73)): a read that crosses a
//     32-bit boundary may be wrong. arm64_858921_read_cntvct_el0 reads
//     twice and keeps the first when bit 32 differs, else the second.
//   - Allwinner A64 "UNKNOWN1" ("allwinner,erratum-unknown1"): while bit
//     10 or above rolls over, the low bits may read all ones or all
//     zeros. __sun50i_a64_read_reg reads until bits 8:0 are neither, at
//     most 150 times (GENMASK(8, 0) since 8b33dfe0ba1c, "Improve
//     Allwinner A64 timer workaround"; bits 9:0 before it).
//
// A kernel built with the workaround also stops user space from reading
// the counter (arch_counter_set_user_access leaves CNTKCTL_EL1.EL0VCTEN
// clear, "Trapping CNTVCT access") and answers every MRS from its trap
// handler with the workaround read (traps.c, cntvct_read_handler calls
// arch_timer_read_counter); it also turns the vDSO off for the counter
// (vdso_clock_mode = VDSO_CLOCKMODE_NONE), so clock_gettime becomes a
// system call. A kernel built without it leaves the counter readable and
// wrong now and then, for its own clock as for ours.
//
// So the clock, like the kernel, applies the workaround read wherever
// the erratum is present: on a trapping kernel it filters values that are
// already right (a waste, but a bounded one), on a kernel without the
// workaround it is the only protection there is. Which of the two it is
// shows in the cost: a trapped read costs hundreds of ns. The decision is
// then the one any counter gets: measure the read as it will be used and
// fall back to the portable source when that costs more than the
// portable source's read (the root package's decideCNTVCT).

// Erratum names a counter erratum the kernel works around.
type Erratum int

const (
	None Erratum = iota
	FSLA008585
	HiSilicon161010101
	ARM858921
	Sun50iUnknown1
)

// errataText is each erratum's name and what its read does (see
// Workaround).
var errataText = [...]struct{ name, workaround string }{
	None:               {"none", "plain read"},
	FSLA008585:         {"Freescale erratum A-008585", "reads twice until both agree (at most 200 times)"},
	HiSilicon161010101: {"HiSilicon erratum 161010101", "reads twice until the second is less than 32 past the first (at most 50 times)"},
	ARM858921:          {"ARM erratum 858921", "reads twice, keeps the first if bit 32 changed"},
	Sun50iUnknown1:     {"Allwinner erratum UNKNOWN1", "reads until bits 8:0 are neither all ones nor all zeros (at most 150 times)"},
}

func (e Erratum) known() bool { return e >= 0 && int(e) < len(errataText) }

func (e Erratum) String() string {
	if e.known() {
		return errataText[e].name
	}
	return fmt.Sprintf("errata.Erratum(%d)", int(e))
}

// Workaround says in words what the erratum's read does.
func (e Erratum) Workaround() string {
	if e.known() {
		return errataText[e].workaround
	}
	return "plain read"
}

// The device-tree properties the kernel's ool_workarounds[] matches in
// the arch timer node (ate_match_dt), in the kernel's order: the first
// match wins.
var dtErrata = []struct {
	property string
	erratum  Erratum
}{
	{"fsl,erratum-a008585", FSLA008585},
	{"hisilicon,erratum-161010101", HiSilicon161010101},
	{"allwinner,erratum-unknown1", Sun50iUnknown1},
}

// archTimerCompatibles are the compatible strings of the arch timer node
// (arch_timer_of_match). The memory-mapped timer, "arm,armv7-timer-mem",
// is another node and another driver.
var archTimerCompatibles = []string{"arm,armv7-timer", "arm,armv8-timer"}

// hisiOEMTables are the GTDT OEM table ids the kernel matches for
// HiSilicon 161010101 on ACPI machines (hisi_161010101_oem_info[]: OEM id
// "HISI  ", revision 0; the trailing spaces are part of the ids).
var hisiOEMTables = []string{"HIP05   ", "HIP06   ", "HIP07   "}

// MIDR_EL1 fields (arch/arm64/include/asm/cputype.h). The kernel's model
// match compares implementer, architecture and part number; "all
// versions" ignores variant and revision.
const (
	midrModelMask  = 0xff0ffff0
	midrCortexA73  = 0x410fd090 // implementer 0x41 (ARM), architecture 0xf, part 0xd09
	maxDTNodes     = 4096       // bounds the device-tree walk
	gtdtHeaderSize = 36         // an ACPI table header
)

// Match says which erratum applies and what showed it.
type Match struct {
	Erratum Erratum
	Where   string // "device tree /timer: fsl,erratum-a008585", "MIDR_EL1 0x410fd034 (cpu2)", ...
	// Unknown lists what could not be read and might have named an
	// erratum (an ACPI table readable by root only, say).
	Unknown []string
}

// Detect looks for the counter errata the kernel knows in a
// file system laid out like the root one (os.DirFS("/") on a live
// system, a recorded layout in tests), in the kernel's order: the device
// tree's arch timer node (global workarounds, enabled at timer probe),
// else the ACPI GTDT's OEM (the same, on ACPI machines), else any CPU's
// MIDR (858921 is a per-CPU capability, checked as each CPU comes up,
// and it loses to a global workaround already enabled).
func Detect(root fs.FS) Match {
	var m Match
	if node, dtPath, err := findArchTimerNode(root); err == nil {
		for _, dt := range dtErrata {
			if _, err := fs.Stat(root, path.Join(node, dt.property)); err == nil {
				m.Erratum = dt.erratum
				m.Where = fmt.Sprintf("device tree %s: %s", dtPath, dt.property)
				return m
			}
		}
	} else if !isNotExist(err) {
		m.Unknown = append(m.Unknown, "device tree: "+err.Error())
	}

	if table, err := fs.ReadFile(root, "sys/firmware/acpi/tables/GTDT"); err == nil {
		if oem, ok := hisiGTDT(table); ok {
			m.Erratum = HiSilicon161010101
			m.Where = "ACPI GTDT OEM " + oem
			return m
		}
	} else if !isNotExist(err) {
		m.Unknown = append(m.Unknown, "ACPI GTDT: "+err.Error())
	}

	if where, err := findCortexA73(root); err != nil {
		m.Unknown = append(m.Unknown, "MIDR: "+err.Error())
	} else if where != "" {
		m.Erratum = ARM858921
		m.Where = where
	}
	return m
}

// dtRoots are where the device tree shows: /proc/device-tree is a link to
// the second.
var dtRoots = []string{"proc/device-tree", "sys/firmware/devicetree/base"}

// findArchTimerNode returns the path in root of the device-tree node
// whose compatible list names an arch timer, and its path in the tree:
// /timer where it is that, as in every in-tree device tree, else the
// first match of a breadth-first walk of at most maxDTNodes nodes. err
// wraps fs.ErrNotExist where there is no device tree or no timer in it
// (an ACPI machine, not Linux).
func findArchTimerNode(root fs.FS) (node, dtPath string, err error) {
	for _, dt := range dtRoots {
		if _, err := fs.Stat(root, dt); err != nil {
			continue
		}
		// Every in-tree device tree names it /timer: look there first.
		if compatible, err := fs.ReadFile(root, dt+"/timer/compatible"); err == nil && isArchTimer(compatible) {
			return dt + "/timer", "/timer", nil
		}
		queue := []string{dt}
		for visited := 0; len(queue) > 0 && visited < maxDTNodes; visited++ {
			node := queue[0]
			queue = queue[1:]
			entries, err := fs.ReadDir(root, node)
			if err != nil {
				continue
			}
			if compatible, err := fs.ReadFile(root, path.Join(node, "compatible")); err == nil && isArchTimer(compatible) {
				return node, "/" + strings.TrimPrefix(strings.TrimPrefix(node, dt), "/"), nil
			}
			for _, e := range entries {
				if e.IsDir() {
					queue = append(queue, path.Join(node, e.Name()))
				}
			}
		}
		// An ACPI machine may show a device tree with /chosen alone.
		return "", "", fmt.Errorf("no node compatible with %s in %s: %w", strings.Join(archTimerCompatibles, " or "), dt, fs.ErrNotExist)
	}
	return "", "", fmt.Errorf("no device tree: %w", fs.ErrNotExist)
}

// isArchTimer reports whether a compatible property (NUL-terminated
// strings) names an arch timer.
func isArchTimer(compatible []byte) bool {
	for _, c := range bytes.Split(compatible, []byte{0}) {
		for _, want := range archTimerCompatibles {
			if string(c) == want {
				return true
			}
		}
	}
	return false
}

// hisiGTDT reports whether an ACPI GTDT's header names a HiSilicon table
// the kernel applies 161010101 to, and which.
func hisiGTDT(table []byte) (oem string, ok bool) {
	if len(table) < gtdtHeaderSize || string(table[:4]) != "GTDT" {
		return "", false
	}
	oemID, tableID := string(table[10:16]), string(table[16:24])
	revision := binary.LittleEndian.Uint32(table[24:28])
	if oemID != "HISI  " || revision != 0 {
		return "", false
	}
	for _, id := range hisiOEMTables {
		if tableID == id {
			return strings.TrimSpace(oemID) + " " + strings.TrimSpace(tableID), true
		}
	}
	return "", false
}

// findCortexA73 looks for a Cortex-A73 among the CPUs, by the MIDR_EL1
// the kernel exports for each CPU, or where it does not (kernels before
// 4.7), by /proc/cpuinfo's implementer and part. It returns where it saw
// one, or "".
func findCortexA73(root fs.FS) (string, error) {
	files, err := fs.Glob(root, "sys/devices/system/cpu/cpu[0-9]*/regs/identification/midr_el1")
	if err != nil {
		return "", err
	}
	sort.Slice(files, func(i, j int) bool { return cpuNumber(files[i]) < cpuNumber(files[j]) })
	for _, f := range files {
		content, err := fs.ReadFile(root, f)
		if err != nil {
			return "", err
		}
		midr, err := parseMIDR(content)
		if err != nil {
			return "", fmt.Errorf("%s: %w", f, err)
		}
		if midr&midrModelMask == midrCortexA73 {
			return fmt.Sprintf("MIDR_EL1 %#x (cpu%d)", midr, cpuNumber(f)), nil
		}
	}
	if len(files) > 0 {
		return "", nil
	}

	cpuinfo, err := fs.ReadFile(root, "proc/cpuinfo")
	if err != nil {
		if isNotExist(err) {
			return "", nil
		}
		return "", err
	}
	return cpuinfoCortexA73(cpuinfo)
}

// parseMIDR reads a midr_el1 file: the register in hex ("0x%016llx\n").
func parseMIDR(content []byte) (uint64, error) {
	return strconv.ParseUint(strings.TrimPrefix(strings.TrimSpace(string(content)), "0x"), 16, 64)
}

// cpuinfoCortexA73 looks for a Cortex-A73 in /proc/cpuinfo's blocks (one
// per processor, ended by a blank line), by the implementer and part the
// arm64 kernel writes for each. A line too long for the scanner is an
// error: what follows it might have named one.
func cpuinfoCortexA73(cpuinfo []byte) (string, error) {
	var implementer, part string
	cpu := "?"
	scanner := bufio.NewScanner(bytes.NewReader(cpuinfo))
	for scanner.Scan() {
		key, value, ok := strings.Cut(scanner.Text(), ":")
		if !ok {
			implementer, part = "", "" // a blank line ends a processor's block
			continue
		}
		key, value = strings.TrimSpace(key), strings.TrimSpace(value)
		switch key {
		case "processor":
			cpu = value
		case "CPU implementer":
			implementer = value
		case "CPU part":
			part = value
		}
		if strings.EqualFold(implementer, "0x41") && strings.EqualFold(part, "0xd09") {
			return fmt.Sprintf("/proc/cpuinfo: CPU implementer 0x41, part 0xd09 (processor %s)", cpu), nil
		}
	}
	if err := scanner.Err(); err != nil {
		return "", fmt.Errorf("proc/cpuinfo: %w", err)
	}
	return "", nil
}

// cpuNumber returns N from a .../cpuN/... path (-1 when there is none).
func cpuNumber(p string) int {
	for _, part := range strings.Split(p, "/") {
		if n, err := strconv.Atoi(strings.TrimPrefix(part, "cpu")); err == nil && strings.HasPrefix(part, "cpu") {
			return n
		}
	}
	return -1
}

func isNotExist(err error) bool { return errors.Is(err, fs.ErrNotExist) }

// The workaround reads, after the kernel's, on any raw read function: the
// clock's arm64 build applies them to its readCNTVCT, through one named
// function per erratum whose call inlines the loop, tests to fake
// counters that glitch the way each erratum does. Each raw read the clock
// gives is ordered (ISB before, a dependent load after), so the value
// returned, whichever read it came from, is ordered after the caller's
// earlier loads and before its later ones.

// FSLA008585Read is __fsl_a008585_read_reg: two reads that agree cannot
// both be wrong. The counter ticks far slower than two reads take (25 MHz
// on the affected parts), so agreement comes at once unless one read was
// wrong or the thread was interrupted between them. After 200 tries the
// kernel returns the last read anyway (with a warning); so does this.
func FSLA008585Read(raw func() uint64) uint64 {
	for retries := 200; ; {
		old, now := raw(), raw()
		retries--
		if old == now || retries == 0 {
			return now
		}
	}
}

// HiSilicon161010101Read is __hisi_161010101_read_reg: a wrong read is off by
// 32 or more, so a second read less than 32 past the first shows both
// right. Up to 50 tries, then the last read.
func HiSilicon161010101Read(raw func() uint64) uint64 {
	for retries := 50; ; {
		old, now := raw(), raw()
		retries--
		if (now-old)>>5 == 0 || retries == 0 {
			return now
		}
	}
}

// ARM858921Read is arm64_858921_read_cntvct_el0. A read during which the
// low word wraps may come back with the high word already carried and
// the low word not yet wrapped, 2^32 ahead. Of two reads, a wrong first
// one already has the new bit 32 and agrees with the second, which is
// kept and right; when bit 32 differs, the first was taken before the
// wrap and is right, whatever the second is.
func ARM858921Read(raw func() uint64) uint64 {
	old, now := raw(), raw()
	if (old^now)>>32&1 != 0 {
		return old
	}
	return now
}

// sun50iLowMask is GENMASK(8, 0): the low bits that read all ones or all
// zeros while a higher bit rolls over.
const sun50iLowMask = 1<<9 - 1

// Sun50iUnknown1Read is __sun50i_a64_read_reg: it rejects a read whose
// bits 8:0 are all ones or all zeros ((val+1) & mask <= 1), right ones
// included, which costs one more read in 256. Up to 150 reads (three
// 24 MHz periods of CPU cycles), then the last.
func Sun50iUnknown1Read(raw func() uint64) uint64 {
	for retries := 150; ; {
		val := raw()
		retries--
		if (val+1)&sun50iLowMask > 1 || retries == 0 {
			return val
		}
	}
}
