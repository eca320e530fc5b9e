//go:build linux

package vmclock

import (
	"errors"

	"golang.org/x/sys/unix"

	"github.com/schedclock/schedclock/internal/format"
)

// Open maps the page at path (DevicePath) read-only, as the kernel's
// vmclock_miscdev_mmap allows (one page, offset 0, no write), and checks
// its constant fields: magic, version, size. The mapping lives as long as
// the process; a device that is not there, or that this process may not
// open, is ErrNoDevice. (The system calls are x/sys's, not package os's:
// a first call that finds no device touches less code.)
func Open(path string) (*Page, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil, format.Errorf("%w: no %s", ErrNoDevice, path)
		}
		return nil, format.Errorf("%w: %s: %v", ErrNoDevice, path, err)
	}
	defer unix.Close(fd)
	b, err := unix.Mmap(fd, 0, unix.Getpagesize(), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return nil, format.Errorf("%w: mmap %s: %v", ErrNoDevice, path, err)
	}
	p, err := FromBytes(b)
	if err == nil {
		err = p.Header().CheckHeader(uint64(len(b)))
	}
	if err != nil {
		_ = unix.Munmap(b)
		return nil, format.Errorf("%s: %w", path, err)
	}
	return p, nil
}
