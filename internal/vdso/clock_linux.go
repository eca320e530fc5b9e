package vdso

import (
	"fmt"
	"runtime"
	"sync"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// live is this process's vDSO clock_gettime, looked up once, on the first
// Open.
var live struct {
	once  sync.Once
	entry uintptr
	path  string
}

// defaultEntry finds the vDSO's clock_gettime: its address, or 0 and the
// reason the system call is used instead, as the path to report.
func defaultEntry() (uintptr, string) {
	live.once.Do(func() {
		if !callerBuilt {
			live.path = "system call (" + noCallerReason() + ")"
			return
		}
		base, image, err := liveImage()
		if err != nil {
			live.path = "system call (" + err.Error() + ")"
			return
		}
		live.entry, live.path = entryIn(base, image, runtime.GOARCH, checkCaller)
	})
	return live.entry, live.path
}

// entryIn looks up the clock_gettime of arch in image, mapped at base,
// and returns its address and the path to report; or 0 and the reason
// the system call is used. check vets the caller itself (the arm64 g
// slot) before the vDSO is trusted with it.
func entryIn(base uintptr, image []byte, arch string, check func() error) (uintptr, string) {
	var sym symbol
	var machine uint16
	switch arch {
	case "amd64":
		sym, machine = symbolAMD64, elfMachineX8664
	case "arm64":
		sym, machine = symbolARM64, elfMachineAArch64
	default:
		return 0, "system call (no vDSO caller for linux/" + arch + ")"
	}
	if m, err := imageMachine(image); err != nil {
		return 0, "system call (vDSO unusable: " + err.Error() + ")"
	} else if m != machine {
		return 0, fmt.Sprintf("system call (vDSO is for e_machine %d, not %s)", m, arch)
	}
	off, err := lookupSymbol(image, sym)
	if err != nil {
		return 0, "system call (vDSO unusable: " + err.Error() + ")"
	}
	if err := check(); err != nil {
		return 0, "system call (vDSO found, caller unverified: " + err.Error() + ")"
	}
	return base + uintptr(off), "vDSO " + sym.name + " (" + sym.version + ")"
}

// openClock returns the Clock for id, reading it once through the path
// Now will take to learn whether it exists.
func openClock(id ID, find func() (uintptr, string)) (*Clock, error) {
	c := &Clock{native: int32(id), id: id}
	entry, path := find()
	if entry != 0 {
		ns, ret := callClockGettime(entry, c.native)
		if ret == 0 && ns > 0 {
			c.entry, c.path = entry, path
			return c, nil
		}
		// The vDSO's clock_gettime makes the system call itself for
		// the clocks it cannot answer, so a refusal is the kernel's.
		path = fmt.Sprintf("system call (the vDSO answered %d for %v)", ret, id)
	}
	c.path = path
	if _, errno := syscallClock(c.native); errno != 0 {
		if errno == unix.EINVAL {
			return nil, fmt.Errorf("%w: %v: clock_gettime: %v", ErrUnsupported, id, errno)
		}
		return nil, fmt.Errorf("vdso: %v: clock_gettime: %w", id, errno)
	}
	return c, nil
}

func (c *Clock) syscallNow() int64 {
	ns, _ := syscallClock(c.native)
	return ns
}

// syscallClock reads a clock through the clock_gettime system call. It is
// a raw system call (no entersyscall): clock_gettime never blocks, and
// the scheduler's bookkeeping would cost more than the call.
func syscallClock(clockid int32) (int64, syscall.Errno) {
	var ts unix.Timespec
	_, _, errno := unix.RawSyscall(unix.SYS_CLOCK_GETTIME, uintptr(clockid), uintptr(unsafe.Pointer(&ts)), 0)
	if errno != 0 {
		return 0, errno
	}
	return ts.Nano(), 0
}
