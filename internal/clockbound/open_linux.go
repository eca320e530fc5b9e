//go:build linux

package clockbound

import (
	"errors"

	"golang.org/x/sys/unix"

	"github.com/schedclock/schedclock/internal/format"
)

// Open maps the segment at path (DefaultPath) shared and read-only, as
// the reference reader does: the header read first, its size the length
// mapped; the header must pass CheckHeader, and the file hold the size
// it says. The mapping lives as long as the process. No file, or one
// this process may not read, is ErrNoSegment. (The system calls are
// x/sys's, not package os's: a first call that finds no daemon touches
// less code.)
func Open(path string) (*Segment, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil, format.Errorf("%w: no %s", ErrNoSegment, path)
		}
		return nil, format.Errorf("%w: %s: %v", ErrNoSegment, path, err)
	}
	defer unix.Close(fd)
	var header [HeaderSize]byte
	if n, err := unix.Pread(fd, header[:], 0); n < HeaderSize {
		return nil, format.Errorf("%w: %s: %d bytes of the %d-byte header (%v)", ErrLayout, path, n, HeaderSize, err)
	}
	s := headerOf(header[:])
	if err := s.CheckHeader(1 << 32); err != nil {
		return nil, format.Errorf("%s: %w", path, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Size < int64(s.SegSize) {
		return nil, format.Errorf("%w: %s holds fewer bytes than its segment size %d", ErrLayout, path, s.SegSize)
	}
	b, err := unix.Mmap(fd, 0, int(s.SegSize), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return nil, format.Errorf("%w: mmap %s: %v", ErrNoSegment, path, err)
	}
	g, err := FromBytes(b)
	if err != nil {
		_ = unix.Munmap(b)
		return nil, format.Errorf("%s: %w", path, err)
	}
	return g, nil
}
