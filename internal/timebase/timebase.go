// Package timebase reads the rate of an architecture's counter from what
// the firmware and the kernel tell user space, the way the kernel itself
// reads it:
//
//   - riscv64: the device tree's /cpus/timebase-frequency, one big-endian
//     32-bit cell (arch/riscv/kernel/time.c, of_property_read_u32), as
//     Linux exposes it in /proc/device-tree;
//   - ppc64le: the "timebase" line of /proc/cpuinfo, which the kernel
//     prints from ppc_tb_freq (arch/powerpc/kernel/setup-common.c,
//     show_cpuinfo_summary);
//   - loong64: CPUCFG leaves 2, 4 and 5, decoded as the kernel's
//     calc_const_freq does (arch/loongarch/kernel/time.c).
//
// Every parser takes the raw bytes or words and returns a rate in Hz or
// an error that says what was wrong; none of them panics, whatever it is
// given (each has a fuzz target).
package timebase

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// ErrNoRate is wrapped by every error of this package: the input did not
// give a usable rate.
var ErrNoRate = errors.New("timebase: no counter rate")

// ErrNoTimebaseLine is wrapped (with ErrNoRate) by CPUInfoTimebase's
// error for a file without a timebase line: not a ppc64 kernel's, as
// under qemu-user, which passes the host's /proc/cpuinfo through. The
// caller may measure the rate instead.
var ErrNoTimebaseLine = errors.New("cpuinfo has no timebase line")

// DeviceTreePath is where Linux exposes the riscv64 timer's rate: the
// property the kernel's riscv_timer_init reads (time_init, arch/riscv/kernel/time.c).
const DeviceTreePath = "/proc/device-tree/cpus/timebase-frequency"

// CPUInfoPath is the file whose "timebase" line gives the ppc64 time base
// frequency.
const CPUInfoPath = "/proc/cpuinfo"

// DeviceTreeFrequency decodes the timebase-frequency property: one 32-bit
// big-endian cell. The kernel reads it with of_property_read_u32, which
// takes the first cell of a longer property; a property of any other
// length than one cell is refused here, because a two-cell (64-bit)
// encoding read that way would give the high word, a rate off by 2^32.
func DeviceTreeFrequency(property []byte) (uint64, error) {
	if len(property) != 4 {
		return 0, fmt.Errorf("%w: timebase-frequency is %d bytes, want one 32-bit cell (4 bytes)", ErrNoRate, len(property))
	}
	hz := binary.BigEndian.Uint32(property)
	if hz == 0 {
		return 0, fmt.Errorf("%w: timebase-frequency is 0", ErrNoRate)
	}
	return uint64(hz), nil
}

// maxCPUInfoLine bounds one line of /proc/cpuinfo: the kernel's lines are
// short (the longest, x86's flags, is some 1.5 KiB), and a longer one is
// not cpuinfo.
const maxCPUInfoLine = 64 << 10

// CPUInfoTimebase finds the "timebase" line of a /proc/cpuinfo file
// ("timebase\t: 512000000": the key, tabs, a colon, a space, the rate in
// Hz in decimal) and returns its rate. The kernel prints it once, in the
// summary after the per-CPU blocks; two lines that disagree, a rate of 0,
// a value that is not a decimal number and a file without the line are
// errors (qemu-user passes the host's /proc/cpuinfo through, which has
// none).
func CPUInfoTimebase(cpuinfo []byte) (uint64, error) {
	scanner := bufio.NewScanner(bytes.NewReader(cpuinfo))
	scanner.Buffer(nil, maxCPUInfoLine)
	var hz uint64
	found := false
	for scanner.Scan() {
		key, value, ok := strings.Cut(scanner.Text(), ":")
		if !ok || strings.TrimRight(key, " \t") != "timebase" {
			continue
		}
		value = strings.TrimSpace(value)
		rate, err := strconv.ParseUint(value, 10, 64)
		switch {
		case err != nil:
			return 0, fmt.Errorf("%w: cpuinfo timebase %q is not a rate in Hz", ErrNoRate, value)
		case rate == 0:
			return 0, fmt.Errorf("%w: cpuinfo timebase is 0", ErrNoRate)
		case found && rate != hz:
			return 0, fmt.Errorf("%w: cpuinfo gives two timebase rates, %d and %d", ErrNoRate, hz, rate)
		}
		hz, found = rate, true
	}
	if err := scanner.Err(); err != nil {
		return 0, fmt.Errorf("%w: reading cpuinfo: %v", ErrNoRate, err)
	}
	if !found {
		return 0, fmt.Errorf("%w: %w", ErrNoRate, ErrNoTimebaseLine)
	}
	return hz, nil
}

// CPUCFG2LLFTP is CPUCFG word 2's bit 14: the constant-frequency timer
// (the stable counter) exists.
const CPUCFG2LLFTP = 1 << 14

// StableCounterFrequency is the kernel's calc_const_freq on the words
// CPUCFG returns for leaves 2, 4 and 5: without LLFTP there is no
// constant-frequency counter; leaf 4 is the base clock in Hz, leaf 5's
// low half a multiplier and its high half a divisor, and the counter runs
// at base * mul / div. Any of them 0 means firmware left it unset.
func StableCounterFrequency(cfg2, cfg4, cfg5 uint32) (uint64, error) {
	if cfg2&CPUCFG2LLFTP == 0 {
		return 0, fmt.Errorf("%w: CPUCFG 2 (%#x) has no constant-frequency timer (LLFTP, bit 14)", ErrNoRate, cfg2)
	}
	base, mul, div := uint64(cfg4), uint64(cfg5&0xffff), uint64(cfg5>>16)
	if base == 0 || mul == 0 || div == 0 {
		return 0, fmt.Errorf("%w: CPUCFG gives base %d Hz, multiplier %d, divisor %d (firmware left one at 0)", ErrNoRate, base, mul, div)
	}
	// base < 2^32 and mul < 2^16: the product fits 48 bits, as in the
	// kernel's unsigned long.
	hz := base * mul / div
	if hz == 0 {
		return 0, fmt.Errorf("%w: CPUCFG gives %d Hz * %d / %d, under 1 Hz", ErrNoRate, base, mul, div)
	}
	return hz, nil
}
