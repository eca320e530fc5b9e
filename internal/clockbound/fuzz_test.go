package clockbound

import (
	"testing"
	"unsafe"
)

// FuzzDecode: any bytes decode to a snapshot or an error, never a panic;
// a snapshot that decodes reads the same through a Segment over the same
// bytes and re-encodes to them; and the client's rule at any monotonic
// instant gives a bound no smaller than bound_nsec, growing with the
// age, or an error. Seeded with the fixtures (synthetic segments in the
// published layout: this machine runs no ClockBound daemon).
func FuzzDecode(f *testing.F) {
	for name := range fixtures {
		f.Add(fixture(f, name), int64(3600e9))
	}
	f.Fuzz(func(t *testing.T, b []byte, mono int64) {
		s, err := Decode(b)
		if err != nil {
			return
		}
		words := make([]uint64, (max(len(b), Size)+7)/8)
		buf := unsafe.Slice((*byte)(unsafe.Pointer(&words[0])), len(words)*8)
		copy(buf, b)
		g, err := FromBytes(buf)
		if err != nil {
			t.Fatal(err)
		}
		got, err := g.Read()
		if err != nil || got != s {
			t.Fatalf("the Segment reads %+v (%v), Decode %+v", got, err, s)
		}
		enc := make([]byte, Size)
		Encode(enc, s)
		for i := range Size - 7 { // the padding is not kept
			if enc[i] != b[i] {
				t.Fatalf("byte %d re-encodes to %#x, was %#x", i, enc[i], b[i])
			}
		}
		bound, status, err := s.At(mono)
		if err != nil {
			return
		}
		if bound < s.BoundNs || status != StatusSynchronized && status != StatusFreeRunning {
			t.Fatalf("At(%d) = %d, %d for %+v", mono, bound, status, s)
		}
		if later, _, err := s.At(mono + 1e6); err == nil && later < bound {
			t.Fatalf("the bound shrank with age: %d, then %d", bound, later)
		}
	})
}
