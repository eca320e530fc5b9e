package vmclock

import (
	"encoding/binary"
	"testing"
)

// FuzzDecode: any bytes decode to a snapshot or an error, never a panic;
// a snapshot that decodes re-encodes to the bytes it came from (within
// its size) and reads the same through a Page; and the time it gives at
// any counter value is the specification's formula, its bound around
// it, or an error. Seeded with the fixtures (synthetic pages in the
// published layout: this machine has no vmclock device).
func FuzzDecode(f *testing.F) {
	for name := range fixtures {
		f.Add(fixture(f, name), uint64(0))
	}
	f.Add(fixture(f, "vmclock-tsc-synchronized.bin")[:Size], uint64(3_000_000_001_234))
	f.Fuzz(func(t *testing.T, b []byte, counter uint64) {
		s, err := Decode(b)
		if err != nil {
			return
		}
		enc := make([]byte, max(len(b), Size))
		copy(enc, b)
		Encode(enc, s)
		for i := range min(int(s.Size), Size, len(b)) {
			if i == 0x20 || i == 0x21 {
				continue // pad[2]: Decode drops it
			}
			if enc[i] != b[i] {
				t.Fatalf("byte %d re-encodes to %#x, was %#x", i, enc[i], b[i])
			}
		}
		page := alignedCopy(enc)
		got, _, err := page.Read(nil)
		if err != nil {
			t.Fatalf("an even page fails to read: %v", err)
		}
		if got != s {
			t.Fatalf("the Page reads %+v, Decode %+v", got, s)
		}
		r, err := s.TimeAt(counter, s.CounterID)
		if err != nil {
			return
		}
		checkReading(t, s, counter, r)
		if le := binary.LittleEndian.Uint32(b[offSeq:]); le&1 != 0 {
			t.Fatalf("a reading from a page being written")
		}
	})
}
