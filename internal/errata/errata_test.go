package errata

import (
	"bufio"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/stretchr/testify/assert"
)

func errataFixture(name string) fs.FS { return os.DirFS(filepath.Join("testdata", "errata", name)) }

func TestDetectCNTVCTErratumFixtures(t *testing.T) {
	tests := []struct {
		fixture string
		erratum Erratum
		where   string
	}{
		{"clean-rpi4", None, ""},
		{"fsl-ls1043a", FSLA008585, "device tree /timer: fsl,erratum-a008585"},
		{"hisi-hip06-dt", HiSilicon161010101, "device tree /timer: hisilicon,erratum-161010101"},
		{"hisi-hip07-acpi", HiSilicon161010101, "ACPI GTDT OEM HISI HIP07"},
		// Only /sys/firmware/devicetree/base, no /proc/device-tree link.
		{"allwinner-a64", Sun50iUnknown1, "device tree /timer: allwinner,erratum-unknown1"},
		// big.LITTLE: the first A73 names the erratum.
		{"amlogic-s922x", ARM858921, "MIDR_EL1 0x410fd092 (cpu2)"},
		// A kernel without the MIDR files: /proc/cpuinfo tells.
		{"kirin960-cpuinfo", ARM858921, "/proc/cpuinfo: CPU implementer 0x41, part 0xd09 (processor 4)"},
		// The memory-mapped timer carries the property, the arch timer
		// (under /soc) does not.
		{"timer-mem-decoy", None, ""},
		// ACPI: a device tree with /chosen alone, another vendor's GTDT.
		{"ampere-altra-acpi", None, ""},
	}
	for _, tt := range tests {
		t.Run(tt.fixture, func(t *testing.T) {
			m := Detect(errataFixture(tt.fixture))
			assert.Equal(t, tt.erratum, m.Erratum, "%+v", m)
			assert.Equal(t, tt.where, m.Where)
			assert.Empty(t, m.Unknown, "every fixture is fully readable")
		})
	}
}

// gtdt builds an ACPI GTDT header with the given OEM fields.
func gtdt(oemID, tableID string, revision byte) []byte {
	table := make([]byte, 96)
	copy(table, "GTDT")
	table[4] = 96
	copy(table[10:16], oemID)
	copy(table[16:24], tableID)
	table[24] = revision
	return table
}

// deniedFS answers fs.ErrPermission for one file, as sysfs does for the
// root-only ACPI tables when not root.
type deniedFS struct {
	fs.FS
	denied string
}

func (d deniedFS) Open(name string) (fs.File, error) {
	if name == d.denied {
		return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrPermission}
	}
	return d.FS.Open(name)
}

func TestDetectCNTVCTErratumEdges(t *testing.T) {
	const gtdtPath = "sys/firmware/acpi/tables/GTDT"
	a72 := &fstest.MapFile{Data: []byte("0x00000000410fd082\n")}
	tests := []struct {
		name    string
		root    fs.FS
		erratum Erratum
		unknown string
	}{
		{"nothing at all", fstest.MapFS{}, None, ""},
		{"HISI HIP07 revision 1", fstest.MapFS{gtdtPath: {Data: gtdt("HISI  ", "HIP07   ", 1)}}, None, ""},
		{"HISI HIP05 revision 0", fstest.MapFS{gtdtPath: {Data: gtdt("HISI  ", "HIP05   ", 0)}}, HiSilicon161010101, ""},
		{"HISI HIP08", fstest.MapFS{gtdtPath: {Data: gtdt("HISI  ", "HIP08   ", 0)}}, None, ""},
		{"truncated GTDT", fstest.MapFS{gtdtPath: {Data: gtdt("HISI  ", "HIP07   ", 0)[:30]}}, None, ""},
		{"another table", fstest.MapFS{gtdtPath: {Data: append([]byte("MADT"), gtdt("HISI  ", "HIP07   ", 0)[4:]...)}}, None, ""},
		{"unreadable GTDT", deniedFS{fstest.MapFS{
			gtdtPath: {Data: gtdt("HISI  ", "HIP07   ", 0)},
			"sys/devices/system/cpu/cpu0/regs/identification/midr_el1": a72,
		}, gtdtPath}, None, "ACPI GTDT: open sys/firmware/acpi/tables/GTDT: permission denied"},
		{"garbled MIDR", fstest.MapFS{
			"sys/devices/system/cpu/cpu0/regs/identification/midr_el1": {Data: []byte("zz\n")},
		}, None, "MIDR: sys/devices/system/cpu/cpu0/regs/identification/midr_el1: "},
		{"A73 r1p0 is still A73", fstest.MapFS{
			"sys/devices/system/cpu/cpu0/regs/identification/midr_el1":  a72,
			"sys/devices/system/cpu/cpu10/regs/identification/midr_el1": {Data: []byte("0x00000000411fd090\n")},
			"sys/devices/system/cpu/cpu9/regs/identification/midr_el1":  {Data: []byte("0x00000000411fd090\n")},
		}, ARM858921, ""},
		{"A75 is not", fstest.MapFS{
			"sys/devices/system/cpu/cpu0/regs/identification/midr_el1": {Data: []byte("0x00000000413fd0a0\n")},
		}, None, ""},
		{"a device-tree erratum wins over the MIDR", fstest.MapFS{
			"proc/device-tree/timer/compatible":                        {Data: []byte("arm,armv8-timer\x00")},
			"proc/device-tree/timer/fsl,erratum-a008585":               {},
			"sys/devices/system/cpu/cpu0/regs/identification/midr_el1": {Data: []byte("0x00000000410fd092\n")},
		}, FSLA008585, ""},
		{"the timer node's compatible list, second entry", fstest.MapFS{
			"proc/device-tree/timer-x/compatible":                 {Data: []byte("vendor,timer\x00arm,armv7-timer\x00")},
			"proc/device-tree/timer-x/allwinner,erratum-unknown1": {},
		}, Sun50iUnknown1, ""},
		{"a compatible that only starts like one", fstest.MapFS{
			"proc/device-tree/timer/compatible":          {Data: []byte("arm,armv8-timer-foo\x00")},
			"proc/device-tree/timer/fsl,erratum-a008585": {},
		}, None, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := Detect(tt.root)
			assert.Equal(t, tt.erratum, m.Erratum, "%+v", m)
			if tt.unknown == "" {
				assert.Empty(t, m.Unknown)
			} else if assert.Len(t, m.Unknown, 1) {
				assert.Contains(t, m.Unknown[0], tt.unknown)
			}
		})
	}
	m := Detect(fstest.MapFS{
		"sys/devices/system/cpu/cpu10/regs/identification/midr_el1": {Data: []byte("0x00000000411fd090\n")},
		"sys/devices/system/cpu/cpu9/regs/identification/midr_el1":  {Data: []byte("0x00000000411fd090\n")},
	})
	assert.Equal(t, "MIDR_EL1 0x411fd090 (cpu9)", m.Where, "CPUs in numeric order")
}

// TestDetectCPUInfoLineTooLong: a /proc/cpuinfo line longer than the
// scanner's buffer (64 KiB) stops the scan, and what follows it, an A73
// here, goes unread: Detect must say so rather than report no erratum.
func TestDetectCPUInfoLineTooLong(t *testing.T) {
	cpuinfo := "processor\t: 0\nFeatures\t: " + strings.Repeat("fp ", 100_000/3) + "\nCPU implementer\t: 0x41\nCPU part\t: 0xd03\n\n" +
		"processor\t: 4\nCPU implementer\t: 0x41\nCPU part\t: 0xd09\n\n"
	m := Detect(fstest.MapFS{"proc/cpuinfo": {Data: []byte(cpuinfo)}})
	assert.Equal(t, None, m.Erratum, "%+v", m)
	if assert.Len(t, m.Unknown, 1, "the line that stopped the scan") {
		assert.Equal(t, "MIDR: proc/cpuinfo: "+bufio.ErrTooLong.Error(), m.Unknown[0])
	}
	// The same file with the long line cut short names the A73.
	short := strings.Replace(cpuinfo, strings.Repeat("fp ", 100_000/3), "fp asimd", 1)
	assert.Equal(t, ARM858921, Detect(fstest.MapFS{"proc/cpuinfo": {Data: []byte(short)}}).Erratum)
}

// glitchCounter is a fake raw counter: a true value that advances by
// step every `every` reads, and a glitch function that may replace what a
// read returns. It records the true value at each read so that a test
// can check that a workaround returned a true value of its own call.
type glitchCounter struct {
	value, step uint64
	every, n    int
	glitch      func(prev, now uint64) (uint64, bool)
	reads       int
	minTrue     uint64 // the true values seen since the last reset
	maxTrue     uint64
	glitched    int
}

func (c *glitchCounter) read() uint64 {
	prev := c.value
	c.n++
	if c.n%c.every == 0 {
		c.value += c.step
	}
	c.reads++
	if c.reads == 1 || c.value < c.minTrue {
		c.minTrue = c.value
	}
	if c.value > c.maxTrue {
		c.maxTrue = c.value
	}
	if c.glitch != nil {
		if v, ok := c.glitch(prev, c.value); ok {
			c.glitched++
			return v
		}
	}
	return c.value
}

// call runs one workaround read and checks it returned a true value seen
// during the call; it returns how many raw reads the call took.
func (c *glitchCounter) call(t *testing.T, workaround func(func() uint64) uint64) int {
	t.Helper()
	c.reads, c.minTrue, c.maxTrue = 0, 0, 0
	got := workaround(c.read)
	if got < c.minTrue || got > c.maxTrue {
		t.Fatalf("workaround returned %#x, outside the true values %#x..%#x of its call", got, c.minTrue, c.maxTrue)
	}
	return c.reads
}

func TestFSLA008585Read(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var last uint64
	// The counter ticks once every 3 reads (25 MHz against fast reads);
	// one read in three is garbage, never the same garbage twice.
	c := &glitchCounter{value: 1 << 40, step: 1, every: 3, glitch: func(_, now uint64) (uint64, bool) {
		if rng.IntN(3) != 0 {
			return 0, false
		}
		for {
			if v := rng.Uint64(); v != last && v != now {
				last = v
				return v, true
			}
		}
	}}
	for i := 0; i < 20000; i++ {
		c.call(t, FSLA008585Read)
	}
	assert.Greater(t, c.glitched, 10000, "the fake must glitch often")

	always := &glitchCounter{value: 5, step: 1, every: 1} // never two equal reads
	assert.Equal(t, 400, always.call(t, FSLA008585Read), "200 tries of two reads, then the last read")
	steady := &glitchCounter{value: 5, step: 1, every: 1 << 30}
	assert.Equal(t, 2, steady.call(t, FSLA008585Read))
}

func TestHiSilicon161010101Read(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	// One to three ticks per read; one read in three off by ±2^k,
	// 5 <= k < 24, twice in a row at times, never by the same error.
	var lastErr int64
	c := &glitchCounter{value: 1 << 40, step: 1, every: 1, glitch: func(_, now uint64) (uint64, bool) {
		if rng.IntN(3) != 0 {
			return 0, false
		}
		for {
			e := int64(1) << (5 + rng.IntN(19))
			if rng.IntN(2) == 0 {
				e = -e
			}
			if e != lastErr {
				lastErr = e
				return uint64(int64(now) + e), true
			}
		}
	}}
	for i := 0; i < 20000; i++ {
		c.step = 1 + uint64(i%3)
		c.call(t, HiSilicon161010101Read)
	}
	assert.Greater(t, c.glitched, 10000)

	always := &glitchCounter{value: 5, step: 32, every: 1}
	assert.Equal(t, 100, always.call(t, HiSilicon161010101Read), "50 tries of two reads")
}

// TestARM858921Read crosses 32-bit boundaries at every phase: a read
// during which the low word wraps returns the high word already carried
// and the low word from before the wrap.
func TestARM858921Read(t *testing.T) {
	carriedEarly := func(prev, now uint64) (uint64, bool) {
		if prev>>32 == now>>32 {
			return 0, false
		}
		return now&^0xffff_ffff | prev&0xffff_ffff, true
	}
	for _, step := range []uint64{1, 3, 7, 1 << 12} {
		for start := uint64(0); start < 4*step; start++ {
			for _, high := range []uint64{0, 1, 0xff} { // bit 32 rising, falling (carry into 33), and up high
				c := &glitchCounter{value: (high<<32 | 0xffff_ffff) - 2*step + start, step: step, every: 1, glitch: carriedEarly}
				for i := 0; i < 4; i++ {
					c.call(t, ARM858921Read)
				}
			}
		}
	}
	// And without the workaround the fake does produce wrong values.
	c := &glitchCounter{value: 0xffff_fffe, step: 1, every: 1, glitch: carriedEarly}
	assert.Equal(t, uint64(0xffff_ffff), c.read())
	assert.Equal(t, uint64(1)<<32|0xffff_ffff, c.read(), "the fake's crossing read is 2^32 ahead")

	steady := &glitchCounter{value: 5, step: 1, every: 1}
	assert.Equal(t, 2, steady.call(t, ARM858921Read))
}

// TestSun50iUnknown1Read rolls bit 10 and above over with the low bits
// reading all ones or all zeros (bits 8:0, and bit 9 with them at times)
// in the reads around each rollover.
func TestSun50iUnknown1Read(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	near := func(v uint64) bool { low := v & 0x3ff; return low < 2 || low > 0x3fd }
	c := &glitchCounter{value: 1 << 30, step: 1, every: 2, glitch: func(_, now uint64) (uint64, bool) {
		if !near(now) || rng.IntN(2) == 0 {
			return 0, false
		}
		mask := uint64(0x1ff)
		if rng.IntN(2) == 0 {
			mask = 0x3ff
		}
		if rng.IntN(2) == 0 {
			return now &^ mask, true // 7ff -> 000 -> 800: backwards
		}
		return now | mask, true // 7ff -> fff -> 800: forwards
	}}
	var prev uint64
	for i := 0; i < 20000; i++ {
		c.call(t, Sun50iUnknown1Read)
		got := Sun50iUnknown1Read(c.read)
		assert.GreaterOrEqual(t, got, prev, "never backwards")
		prev = got
	}
	assert.Greater(t, c.glitched, 50)

	stuck := &glitchCounter{value: 0x400, step: 1, every: 1 << 30} // low bits all zero, not moving
	assert.Equal(t, 150, stuck.call(t, Sun50iUnknown1Read), "150 reads, then the last")
	fine := &glitchCounter{value: 0x405, step: 1, every: 1}
	assert.Equal(t, 1, fine.call(t, Sun50iUnknown1Read))
}

// TestWorkaroundsPassCleanCountersThrough: on a counter without the
// erratum each workaround returns the counter's own values, in order.
func TestWorkaroundsPassCleanCountersThrough(t *testing.T) {
	for name, workaround := range map[string]func(func() uint64) uint64{
		"fsl": FSLA008585Read, "hisi": HiSilicon161010101Read, "858921": ARM858921Read, "sun50i": Sun50iUnknown1Read,
	} {
		c := &glitchCounter{value: 0xffff_0000, step: 1, every: 4}
		var prev uint64
		for i := 0; i < 1<<16; i++ {
			if got := workaround(c.read); got < prev || got > c.value {
				t.Fatalf("%s: read %#x after %#x, counter at %#x", name, got, prev, c.value)
			} else {
				prev = got
			}
		}
	}
}
