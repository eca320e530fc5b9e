package vdso

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math/big"
	"os"
	"slices"
	"strings"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

const auxvWord = int(unsafe.Sizeof(uintptr(0)))

// encodeAuxv writes pairs as the kernel lays out /proc/self/auxv: native
// words, tag then value.
func encodeAuxv(pairs [][2]uintptr) []byte {
	var b []byte
	for _, kv := range pairs {
		for _, w := range kv {
			if auxvWord == 8 {
				b = binary.NativeEndian.AppendUint64(b, uint64(w))
			} else {
				b = binary.NativeEndian.AppendUint32(b, uint32(w))
			}
		}
	}
	return b
}

// FuzzAuxv: parseAuxv reads the file's pairs in order up to AT_NULL or
// the last whole pair, and nothing else: writing them back gives the
// file's start, and what follows is AT_NULL or less than a pair.
func FuzzAuxv(f *testing.F) {
	if raw, err := os.ReadFile("/proc/self/auxv"); err == nil {
		f.Add(raw)
	}
	if auxv, err := unix.Auxv(); err == nil {
		pairs := make([][2]uintptr, len(auxv))
		for i, kv := range auxv {
			pairs[i] = [2]uintptr{kv[0], kv[1]}
		}
		f.Add(append(encodeAuxv(pairs), make([]byte, 2*auxvWord)...))
	}
	f.Add(encodeAuxv([][2]uintptr{{atSysinfoEhdr, 0}, {6, 4096}, {atSysinfoEhdr, 0x7fff0000}}))
	f.Fuzz(func(t *testing.T, raw []byte) {
		pairs := parseAuxv(raw)
		written := encodeAuxv(pairs)
		if !bytes.HasPrefix(raw, written) {
			t.Fatalf("parseAuxv(%x) = %x: not the file's start", raw, pairs)
		}
		if rest := raw[len(written):]; len(rest) >= 2*auxvWord && !bytes.Equal(rest[:auxvWord], make([]byte, auxvWord)) {
			t.Fatalf("parseAuxv(%x) = %x stops before %x, not AT_NULL", raw, pairs, rest)
		}
		for _, kv := range pairs {
			if kv[0] == 0 {
				t.Fatalf("parseAuxv(%x) = %x reads past AT_NULL", raw, pairs)
			}
		}
		if again := parseAuxv(append(written, make([]byte, 2*auxvWord)...)); !slices.Equal(again, pairs) {
			t.Fatalf("parseAuxv(%x) = %x, then %x", raw, pairs, again)
		}

		// The vDSO is the first AT_SYSINFO_EHDR with an address.
		var want uintptr
		for i := len(pairs) - 1; i >= 0; i-- {
			if pairs[i][0] == atSysinfoEhdr && pairs[i][1] != 0 {
				want = pairs[i][1]
			}
		}
		if got, err := findSysinfoEhdr(pairs); got != want || (err == nil) != (want != 0) || err != nil && !errors.Is(err, errNoVDSO) {
			t.Fatalf("findSysinfoEhdr(%x) = %#x, %v; want %#x", pairs, got, err, want)
		}
	})
}

// mappingEnd returns the end of the mapping in /proc/self/maps that holds
// addr (addr itself where none does), and false when /proc/self/maps
// cannot be read: the tests' view of what the kernel maps.
func mappingEnd(addr uintptr) (uintptr, bool) {
	maps, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		return 0, false
	}
	for line := range strings.Lines(string(maps)) {
		var lo, hi uintptr
		if n, _ := fmt.Sscanf(line, "%x-%x ", &lo, &hi); n == 2 && lo <= addr && addr < hi {
			return hi, true
		}
	}
	return addr, true
}

// imageLengthRef is imageLength from the header fields with no bound
// arithmetic of its own to get wrong: big numbers throughout.
func imageLengthRef(page []byte) (uint64, error) {
	if string(page[:4]) != "\x7fELF" || page[4] != elfClass64 || page[5] != elfDataLSB {
		return 0, errNotELF
	}
	big64 := func(off int) *big.Int { return new(big.Int).SetUint64(le.Uint64(page[off:])) }
	phoff := big64(32)
	phentsize, phnum := int64(le.Uint16(page[54:])), int64(le.Uint16(page[56:]))
	end := new(big.Int).Add(phoff, big.NewInt(phentsize*phnum))
	if phentsize < elfPhdrSize || end.Cmp(big.NewInt(minPage)) > 0 {
		return 0, errMalformed
	}
	n := new(big.Int)
	for i := range phnum {
		ph := int(phoff.Int64() + i*phentsize)
		if le.Uint32(page[ph:]) != ptLoad {
			continue
		}
		segEnd := new(big.Int).Add(big64(ph+8), big64(ph+32))
		if segEnd.Cmp(big.NewInt(maxImage)) > 0 {
			return 0, errMalformed
		}
		if segEnd.Cmp(n) > 0 {
			n = segEnd
		}
	}
	if n.Cmp(big.NewInt(elfHdrSize)) < 0 {
		return 0, errMalformed
	}
	return n.Uint64(), nil
}

// FuzzImageLength: imageLength reads no byte of the program headers
// outside the first page, agrees with a reference in big numbers, gives a
// length between the ELF header's and maxImage, and one that an image
// the lookup accepts holds.
func FuzzImageLength(f *testing.F) {
	for _, ti := range testImages {
		f.Add(readImage(f, ti.file))
	}
	if _, image, err := liveImage(); err == nil {
		f.Add(image)
	}
	f.Fuzz(func(t *testing.T, image []byte) {
		// The caller maps at least a page: the header's.
		page := make([]byte, max(len(image), minPage))
		copy(page, image)
		n, err := imageLength(page[:elfHdrSize], func(off, size uint64) []byte {
			if off > minPage || size > minPage-off {
				t.Fatalf("imageLength reads the program headers at [%#x, +%#x), outside the first page", off, size)
			}
			return page[off : off+size]
		})
		wantN, wantErr := imageLengthRef(page)
		if n != wantN || (err == nil) != (wantErr == nil) || err != nil && !errors.Is(err, wantErr) {
			t.Fatalf("imageLength = %d, %v; want %d, %v", n, err, wantN, wantErr)
		}
		if err != nil {
			return
		}
		if n < elfHdrSize || n > maxImage {
			t.Fatalf("imageLength = %d, outside [%d, %d]", n, elfHdrSize, maxImage)
		}
		if _, perr := parseELF(page); perr == nil && n > uint64(len(page)) {
			t.Fatalf("parseELF accepts a %d-byte image whose PT_LOADs reach %d", len(page), n)
		}
	})
}
