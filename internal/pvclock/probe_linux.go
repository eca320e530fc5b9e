//go:build linux

package pvclock

import (
	"errors"
	"fmt"
	"os"
	"syscall"
	"unsafe"
)

// copyOut copies len(buf) bytes of this process's memory at addr into
// buf without touching addr from user mode: it write(2)s them into a
// pipe and reads them back. The kernel copies them with copy_from_user,
// whose page fault runs the vvar mapping's fault handler; when that
// handler refuses the page (vvar_vclock_fault, or vvar_fault before
// 6.13, returns VM_FAULT_SIGBUS for a vclock page the vDSO has not
// used), a fault in kernel mode on a user address is fixed up to
// EFAULT instead of a signal. The obvious probes do not work on these
// pages: /proc/self/mem and process_vm_readv go through
// get_user_pages, which refuses VM_IO|VM_PFNMAP mappings outright, so
// they fail with EIO/EFAULT even for a page that is mapped and
// readable (measured here on Linux 6.18 for every [vvar] and
// [vvar_vclock] page; the kernel's own comment in vma.c says these
// flags "protect .fault() handler from being called through interfaces
// like /proc/$pid/mem or process_vm_{readv,writev}()").
func copyOut(addr uint64, buf []byte) error {
	var fds [2]int
	if err := syscall.Pipe2(fds[:], syscall.O_CLOEXEC); err != nil {
		return fmt.Errorf("pipe2: %w", err)
	}
	defer syscall.Close(fds[0])
	defer syscall.Close(fds[1])
	n, _, errno := syscall.Syscall(syscall.SYS_WRITE, uintptr(fds[1]), uintptr(addr), uintptr(len(buf)))
	if errno != 0 {
		return os.NewSyscallError("write", errno)
	}
	if int(n) != len(buf) {
		return fmt.Errorf("write copied %d of %d bytes", n, len(buf))
	}
	return readFull(fds[0], buf)
}

// readFull reads exactly len(buf) bytes from fd.
func readFull(fd int, buf []byte) error {
	for got := 0; got < len(buf); {
		n, err := syscall.Read(fd, buf[got:])
		if err != nil {
			return os.NewSyscallError("read", err)
		}
		if n == 0 {
			return errors.New("pipe closed early")
		}
		got += n
	}
	return nil
}

// Maps reads /proc/self/maps.
func Maps() ([]Mapping, error) {
	b, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNoPage, err)
	}
	return ParseMaps(string(b)), nil
}

// KernelRelease is uname's release.
func KernelRelease() string {
	var u syscall.Utsname
	if syscall.Uname(&u) != nil {
		return ""
	}
	b := make([]byte, 0, len(u.Release))
	for _, c := range u.Release {
		if c == 0 {
			break
		}
		b = append(b, byte(c))
	}
	return string(b)
}

// ProbePvclock proves the pvclock page at addr mapped and plausible
// (through copyOut, never a load), and only then returns it for the
// readers. The kernel keeps a page mapped once it has mapped it:
// vclocks_used only ever gains bits (vclocks_set_used), so a later
// fault (after a time-namespace change zaps the page tables) maps it
// again.
func ProbePvclock(addr uint64) (*Page, Pvclock, error) {
	var buf [PvclockSize]byte
	if err := copyOut(addr, buf[:]); err != nil {
		return nil, Pvclock{}, fmt.Errorf("%w: the pvclock page at %#x is not mapped (the kernel maps it only once the vDSO runs in pvclock mode): %v", ErrNoPage, addr, err)
	}
	p, err := DecodePvclock(buf[:])
	if err == nil {
		err = p.Plausible()
	}
	if err != nil {
		return nil, p, err
	}
	return (*Page)(unsafe.Add(unsafe.Pointer(nil), uintptr(addr))), p, nil
}

// ProbeHyperv does for the Hyper-V TSC page what ProbePvclock does for
// the pvclock page.
func ProbeHyperv(addr uint64) (*HypervPage, Hyperv, error) {
	var buf [HypervSize]byte
	if err := copyOut(addr, buf[:]); err != nil {
		return nil, Hyperv{}, fmt.Errorf("%w: the Hyper-V TSC page at %#x is not mapped (the kernel maps it only once the vDSO runs in hvclock mode): %v", ErrNoPage, addr, err)
	}
	h, err := DecodeHyperv(buf[:])
	if err == nil {
		err = h.Plausible()
	}
	if err != nil {
		return nil, h, err
	}
	return (*HypervPage)(unsafe.Add(unsafe.Pointer(nil), uintptr(addr))), h, nil
}

// ProbeTimeData finds the vDSO's time data at the start of the [vvar]
// mapping in maps and proves it live, through copyOut, never a load: a
// copy taken while its sequence count stood still holds the
// CLOCK_MONOTONIC_COARSE time a system call read meanwhile (FindCoarse),
// and where: coarse is that base's offset, for TimeData.Layout. A few
// tries, since a timekeeping update may fall between them.
func ProbeTimeData(maps []Mapping) (td *TimeData, coarse int, err error) {
	var addr uint64
	for _, m := range maps {
		if m.Name == "[vvar]" {
			addr = m.Lo
			break
		}
	}
	if addr == 0 {
		return nil, 0, fmt.Errorf("%w: no [vvar] mapping", ErrNoPage)
	}
	var before, after [TimeDataSize]byte
	for try := 0; try < 4; try++ {
		var ts syscall.Timespec
		if err := copyOut(addr, before[:]); err != nil {
			return nil, 0, fmt.Errorf("%w: the vDSO time data at %#x: %v", ErrNoPage, addr, err)
		}
		if _, _, errno := syscall.Syscall(syscall.SYS_CLOCK_GETTIME, clockMonotonicCoarse, uintptr(unsafe.Pointer(&ts)), 0); errno != 0 {
			return nil, 0, os.NewSyscallError("clock_gettime", errno)
		}
		if err := copyOut(addr, after[:]); err != nil {
			return nil, 0, fmt.Errorf("%w: the vDSO time data at %#x: %v", ErrNoPage, addr, err)
		}
		if at, ok := FindCoarse(after[:], uint64(ts.Sec), uint64(ts.Nsec)); ok && before == after {
			return (*TimeData)(unsafe.Add(unsafe.Pointer(nil), uintptr(addr))), at, nil
		}
	}
	return nil, 0, fmt.Errorf("%w: the page at the start of [vvar] (%#x) does not hold the kernel's coarse time (a time namespace's page, or a layout this package does not know)", ErrNoPage, addr)
}

// clockMonotonicCoarse is CLOCK_MONOTONIC_COARSE's id.
const clockMonotonicCoarse = 6
