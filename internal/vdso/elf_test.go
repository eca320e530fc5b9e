package vdso

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The images in testdata are live vDSOs dumped by TestDumpLiveImage:
// vdso_linux_amd64.so from the 6.18 kernel of the machine this package was
// written on (x86-64, both hash tables), vdso_linux_arm64.so from qemu 10's
// aarch64 linux-user emulation (relocated to its load address, which the
// bias arithmetic must handle).
type testImage struct {
	file    string
	sym     symbol
	machine uint16
	offset  uint64 // the symbol's offset, as readelf --dyn-syms shows it less the load address
}

var testImages = []testImage{
	{"vdso_linux_amd64.so", symbolAMD64, elfMachineX8664, 0xb10},
	{"vdso_linux_arm64.so", symbolARM64, elfMachineAArch64, 0x4c8},
}

func readImage(t testing.TB, name string) []byte {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", name))
	require.NoError(t, err)
	return data
}

func TestLookupTestdata(t *testing.T) {
	for _, ti := range testImages {
		t.Run(ti.file, func(t *testing.T) {
			image := readImage(t, ti.file)
			m, err := imageMachine(image)
			require.NoError(t, err)
			assert.Equal(t, ti.machine, m)
			off, err := lookupSymbol(image, ti.sym)
			require.NoError(t, err)
			assert.Equal(t, ti.offset, off)
			// The other architecture's name is not there.
			other := symbolARM64
			if ti.sym == symbolARM64 {
				other = symbolAMD64
			}
			_, err = lookupSymbol(image, other)
			assert.ErrorIs(t, err, errVersionNotFound)
		})
	}
}

// replaceAll returns a copy of image with every old replaced by new (of
// the same length).
func replaceAll(t *testing.T, image []byte, old, new string) []byte {
	t.Helper()
	require.Equal(t, len(old), len(new))
	require.True(t, bytes.Contains(image, []byte(old)), "%q not in the image", old)
	return bytes.ReplaceAll(image, []byte(old), []byte(new))
}

// dynEntry returns the index of the first dynamic entry tagged tag.
func dynEntry(t testing.TB, image []byte, tag uint64) uint64 {
	t.Helper()
	phoff, phnum := le.Uint64(image[32:]), uint64(le.Uint16(image[56:]))
	for i := range phnum {
		ph := phoff + i*elfPhdrSize
		if le.Uint32(image[ph:]) != ptDynamic {
			continue
		}
		off, size := le.Uint64(image[ph+8:]), le.Uint64(image[ph+32:])
		for d := off; d < off+size; d += elfDynSize {
			if le.Uint64(image[d:]) == tag {
				return d
			}
		}
	}
	t.Fatalf("no dynamic tag %#x", tag)
	return 0
}

// setDynTag returns image with the first dynamic entry tagged from
// tagged to: an ignored tag hides a table from the lookup.
func setDynTag(t testing.TB, image []byte, from, to uint64) []byte {
	out := bytes.Clone(image)
	binary.LittleEndian.PutUint64(out[dynEntry(t, image, from):], to)
	return out
}

// setDynVal returns image with the value of the first dynamic entry
// tagged tag set to val.
func setDynVal(t testing.TB, image []byte, tag, val uint64) []byte {
	out := bytes.Clone(image)
	binary.LittleEndian.PutUint64(out[dynEntry(t, image, tag)+8:], val)
	return out
}

func TestLookupRefusals(t *testing.T) {
	image := readImage(t, "vdso_linux_amd64.so")
	sym := symbolAMD64
	cases := []struct {
		name  string
		image []byte
		err   error
	}{
		{"empty", nil, errNotELF},
		{"header only", image[:elfHdrSize], errMalformed},
		{"32-bit class", func() []byte { b := bytes.Clone(image); b[4] = 1; return b }(), errNotELF},
		{"big-endian", func() []byte { b := bytes.Clone(image); b[5] = 2; return b }(), errNotELF},
		{"symbol renamed", replaceAll(t, image, "__vdso_clock_gettime\x00", "__vdso_clock_gettimX\x00"), errSymbolNotFound},
		{"version renamed", replaceAll(t, image, "LINUX_2.6\x00", "LINUX_9.9\x00"), errVersionNotFound},
		{"no symbol table", setDynTag(t, image, dtSymtab, 0x7fffffff), errMalformed},
		{"no string table", setDynTag(t, image, dtStrtab, 0x7fffffff), errMalformed},
		{"symbol entry size", setDynVal(t, image, dtSyment, 16), errMalformed},
		{"code not executable", func() []byte {
			b := bytes.Clone(image)
			phoff := le.Uint64(b[32:])
			binary.LittleEndian.PutUint32(b[phoff+4:], 4) // the PT_LOAD's p_flags: PF_R only
			return b
		}(), errMalformed},
		{"no dynamic table", func() []byte {
			b := bytes.Clone(image)
			phoff := le.Uint64(b[32:])
			binary.LittleEndian.PutUint32(b[phoff+elfPhdrSize:], 0x7fffffff) // PT_DYNAMIC is the second program header
			return b
		}(), errMalformed},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := lookupSymbol(tc.image, sym)
			assert.ErrorIs(t, err, tc.err)
		})
	}
}

// The lookup reads the symbol table itself: hiding both hash tables
// (DT_HASH and DT_GNU_HASH, the amd64 image carries both) changes
// nothing.
func TestLookupWithoutHashTables(t *testing.T) {
	const dtHash, dtGNUHash = 4, 0x6ffffef5
	for _, ti := range testImages {
		image := readImage(t, ti.file)
		off, err := lookupSymbol(setDynTag(t, setDynTag(t, image, dtHash, 0x7fffffff), dtGNUHash, 0x7fffffff), ti.sym)
		require.NoError(t, err, ti.file)
		assert.Equal(t, ti.offset, off, ti.file)
	}
}

// The symbol table ends where the string table starts, or at the end of
// the image where the string table comes first.
func TestSymbolTableBound(t *testing.T) {
	image := readImage(t, "vdso_linux_amd64.so")
	img, err := parseELF(image)
	require.NoError(t, err)
	assert.Equal(t, img.strtab, img.symtab+img.symCount*elfSymSize, "the image's string table follows its symbols")
	strtabAt := func(index uint64) *elfImage {
		img, err := parseELF(setDynVal(t, image, dtStrtab, img.loadVaddr+index-img.loadOffset))
		require.NoError(t, err)
		return img
	}
	assert.Equal(t, uint64(3), strtabAt(img.symtab+3*elfSymSize).symCount)
	assert.Equal(t, uint64(3), strtabAt(img.symtab+3*elfSymSize+elfSymSize-1).symCount, "a partial entry is not read")
	assert.Equal(t, (uint64(len(image))-img.symtab)/elfSymSize, strtabAt(img.symtab-8).symCount)
}

// Without version definitions (DT_VERDEF hidden) nothing is checked, as
// in the runtime.
func TestLookupWithoutVersions(t *testing.T) {
	for _, ti := range testImages {
		off, err := lookupSymbol(setDynTag(t, readImage(t, ti.file), dtVerdef, 0x7fffffff), symbol{name: ti.sym.name, version: "NONE"})
		require.NoError(t, err, ti.file)
		assert.Equal(t, ti.offset, off, ti.file)
	}
}

// Every prefix of a real image, and every byte of it set to a few values,
// parses without a panic; a symbol found lies inside the image.
func TestLookupIsTotal(t *testing.T) {
	for _, ti := range testImages {
		lookupIsTotal(t, ti, readImage(t, ti.file))
	}
}

func lookupIsTotal(t *testing.T, ti testImage, image []byte) {
	for n := range len(image) {
		if off, err := lookupSymbol(image[:n], ti.sym); err == nil {
			require.Less(t, off, uint64(n))
		}
	}
	b := bytes.Clone(image)
	for i := range b {
		orig := b[i]
		for _, v := range []byte{0, 0xff, orig ^ 0x80, orig + 1, orig - 1} {
			b[i] = v
			if off, err := lookupSymbol(b, ti.sym); err == nil {
				require.Less(t, off, uint64(len(b)))
			}
		}
		b[i] = orig
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		c := bytes.Clone(image)
		for range 1 + rng.IntN(16) {
			c[rng.IntN(len(c))] = byte(rng.Uint32())
		}
		if off, err := lookupSymbol(c, ti.sym); err == nil {
			require.Less(t, off, uint64(len(c)))
		}
	}
}

// FuzzLookup mutates the real images: the lookup must neither panic nor
// report a symbol outside the image. go test -fuzz FuzzLookup.
func FuzzLookup(f *testing.F) {
	for _, ti := range testImages {
		f.Add(readImage(f, ti.file))
	}
	f.Fuzz(func(t *testing.T, image []byte) {
		if _, err := imageMachine(image); err != nil {
			return
		}
		for _, sym := range []symbol{symbolAMD64, symbolARM64} {
			if off, err := lookupSymbol(image, sym); err == nil && off >= uint64(len(image)) {
				t.Fatalf("%s at %#x, outside the %d-byte image", sym, off, len(image))
			}
		}
	})
}
