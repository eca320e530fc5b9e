// Package sysfile reads the small files of /proc and /sys that the
// package consults (the kernel's clocksource, /proc/self/maps,
// /proc/cpuinfo). os.ReadFile would do, but it calls File.Stat to size
// its buffer, and a binary that can reach os.fileStat keeps time.Time's
// String and with it time's formatting and time zone loader (see
// TestWeight): those files report a size of 0 anyway.
package sysfile

import (
	"io"
	"os"
)

// Read returns the content of the file at path. Errors are os.Open's
// and File.Read's (errors.Is(err, fs.ErrNotExist) for a missing file).
func Read(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	// io.ReadAll's loop, which a program that reads no other file would
	// link for this alone.
	buf := make([]byte, 0, 512)
	for {
		n, err := f.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			return buf, err
		}
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)] // grow
		}
	}
}
