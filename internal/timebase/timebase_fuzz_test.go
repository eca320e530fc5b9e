package timebase

import (
	"math/big"
	"regexp"
	"strconv"
	"testing"
)

// Each fuzz target checks its parser against a reference written
// differently: the device tree's cell by shifts rather than
// encoding/binary, cpuinfo's line by a regular expression over the whole
// file rather than a line scanner, CPUCFG's arithmetic in math/big.

func FuzzDeviceTreeFrequency(f *testing.F) {
	for _, property := range fixtures(f, "devicetree") {
		f.Add(property)
	}
	f.Add([]byte{})
	f.Add([]byte{0, 0, 0, 0, 0x00, 0x98, 0x96, 0x80})
	f.Fuzz(func(t *testing.T, property []byte) {
		hz, err := DeviceTreeFrequency(property)
		var want uint64
		if len(property) == 4 {
			want = uint64(property[0])<<24 | uint64(property[1])<<16 | uint64(property[2])<<8 | uint64(property[3])
		}
		if (err == nil) != (want != 0) || hz != want {
			t.Fatalf("DeviceTreeFrequency(% x) = %d, %v; the reference says %d", property, hz, err, want)
		}
	})
}

// cpuinfoTimebaseLine is a timebase line: the key at the start of a
// line, blanks, a colon, and the value up to the end of the line.
var cpuinfoTimebaseLine = regexp.MustCompile(`(?m)^timebase[ \t]*:([^\n]*)$`)

// referenceCPUInfoTimebase is CPUInfoTimebase by regular expression: ok
// is false where the file gives no single valid rate. Lines of the
// scanner's maximum length or more are out of its scope.
func referenceCPUInfoTimebase(cpuinfo []byte) (hz uint64, ok bool) {
	for _, m := range cpuinfoTimebaseLine.FindAllSubmatch(cpuinfo, -1) {
		value := string(m[1])
		// The scanner drops a line's \r; TrimSpace drops the rest.
		for len(value) > 0 && (value[0] == ' ' || value[0] == '\t' || value[0] == '\r' || value[0] == '\n' || value[0] == '\v' || value[0] == '\f') {
			value = value[1:]
		}
		for len(value) > 0 && (value[len(value)-1] == ' ' || value[len(value)-1] == '\t' || value[len(value)-1] == '\r' || value[len(value)-1] == '\v' || value[len(value)-1] == '\f') {
			value = value[:len(value)-1]
		}
		rate, err := strconv.ParseUint(value, 10, 64)
		if err != nil || rate == 0 || ok && rate != hz {
			return 0, false
		}
		hz, ok = rate, true
	}
	return hz, ok
}

// hasLongLine reports whether some line of data is at least n bytes long.
func hasLongLine(data []byte, n int) bool {
	run := 0
	for _, c := range data {
		if c == '\n' {
			run = 0
			continue
		}
		if run++; run >= n {
			return true
		}
	}
	return false
}

// hasUnicodeSpace reports whether data holds a byte sequence that
// strings.TrimSpace trims but the reference does not (U+0085, U+00A0 and
// the other Unicode spaces): the reference keeps to ASCII.
var unicodeSpace = regexp.MustCompile(`[\x{85}\x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F}\x{205F}\x{3000}]`)

func FuzzCPUInfoTimebase(f *testing.F) {
	for _, cpuinfo := range fixtures(f, "cpuinfo") {
		f.Add(cpuinfo)
	}
	f.Add([]byte("timebase\t: 512000000\ntimebase\t: 1\n"))
	f.Add([]byte("timebase : 0x1f\r\n"))
	f.Fuzz(func(t *testing.T, cpuinfo []byte) {
		if hasLongLine(cpuinfo, maxCPUInfoLine) || unicodeSpace.Match(cpuinfo) {
			return
		}
		hz, err := CPUInfoTimebase(cpuinfo)
		want, ok := referenceCPUInfoTimebase(cpuinfo)
		if (err == nil) != ok || hz != want {
			t.Fatalf("CPUInfoTimebase(%q) = %d, %v; the reference says %d, %v", cpuinfo, hz, err, want, ok)
		}
	})
}

func FuzzStableCounterFrequency(f *testing.F) {
	// The words qemu-loongarch64 7.2's la464 gives (TestCPUCFGHere logs
	// them under make test-loong64), which a Loongson 3A5000's share:
	// LLFTP set, 100 MHz, 1/1.
	f.Add(uint32(0x40c00f), uint32(100_000_000), uint32(0x10001))
	f.Add(uint32(CPUCFG2LLFTP), uint32(25_000_000), uint32(4<<16|3))
	f.Add(uint32(0), uint32(100_000_000), uint32(0x10001))
	f.Fuzz(func(t *testing.T, cfg2, cfg4, cfg5 uint32) {
		hz, err := StableCounterFrequency(cfg2, cfg4, cfg5)
		var want big.Int
		if cfg2>>14&1 == 1 && cfg5%65536 != 0 && cfg5/65536 != 0 {
			want.Mul(big.NewInt(int64(cfg4)), big.NewInt(int64(cfg5%65536)))
			want.Quo(&want, big.NewInt(int64(cfg5/65536)))
		}
		if (err == nil) != (want.Sign() > 0) || !want.IsUint64() || hz != want.Uint64() {
			t.Fatalf("StableCounterFrequency(%#x, %d, %#x) = %d, %v; the reference says %v", cfg2, cfg4, cfg5, hz, err, &want)
		}
	})
}
