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

// setDynTag rewrites the first dynamic entry tagged from as to: an
// ignored tag hides a table from the lookup.
func setDynTag(t testing.TB, image []byte, from, to uint64) []byte {
	t.Helper()
	img, err := parseELF(image)
	require.NoError(t, err)
	out := bytes.Clone(image)
	phoff, phnum := le.Uint64(image[32:]), uint64(le.Uint16(image[56:]))
	for i := range phnum {
		ph := phoff + i*elfPhdrSize
		if le.Uint32(image[ph:]) != ptDynamic {
			continue
		}
		off, size := le.Uint64(image[ph+8:]), le.Uint64(image[ph+32:])
		for d := off; d < off+size; d += elfDynSize {
			if le.Uint64(image[d:]) == from {
				binary.LittleEndian.PutUint64(out[d:], to)
				return out
			}
		}
	}
	t.Fatalf("no dynamic tag %#x (image with %d symbols)", from, img.symCount)
	return nil
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
		{"no hash table", setDynTag(t, setDynTag(t, image, dtHash, 0x7fffffff), dtGNUHash, 0x7fffffff), errMalformed},
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

// Both hash tables find the symbol: the amd64 image carries both, and
// hiding one leaves the other.
func TestLookupEachHashTable(t *testing.T) {
	for _, ti := range testImages {
		image := readImage(t, ti.file)
		for _, hide := range []uint64{dtHash, dtGNUHash} {
			off, err := lookupSymbol(setDynTag(t, image, hide, 0x7fffffff), ti.sym)
			require.NoError(t, err, "%s without tag %#x", ti.file, hide)
			assert.Equal(t, ti.offset, off, "%s without tag %#x", ti.file, hide)
		}
	}
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

// A SysV hash chain that loops ends the lookup.
func TestLookupLoopingChain(t *testing.T) {
	image := setDynTag(t, readImage(t, "vdso_linux_amd64.so"), dtGNUHash, 0x7fffffff)
	img, err := parseELF(image)
	require.NoError(t, err)
	b := bytes.Clone(image)
	for i := range img.hash.nchain {
		binary.LittleEndian.PutUint32(b[img.hash.chains+4*i:], uint32(i)) // every symbol its own successor
	}
	for i := range img.hash.nbucket {
		binary.LittleEndian.PutUint32(b[img.hash.buckets+4*i:], 3) // a symbol that is not the one sought
	}
	_, err = lookupSymbol(b, symbolAMD64)
	assert.Error(t, err)
}

// variants returns a real image and the same image with its GNU hash
// table hidden: the lookup prefers the GNU table, so only the second
// reaches the SysV one.
func variants(t testing.TB, ti testImage) [][]byte {
	image := readImage(t, ti.file)
	return [][]byte{image, setDynTag(t, image, dtGNUHash, 0x7fffffff)}
}

// Every prefix of a real image, and every byte of it set to a few values,
// parses without a panic; a symbol found lies inside the image. Each
// image twice, to reach both hash tables.
func TestLookupIsTotal(t *testing.T) {
	for _, ti := range testImages {
		for _, image := range variants(t, ti) {
			lookupIsTotal(t, ti, image)
		}
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
		for _, image := range variants(f, ti) {
			f.Add(image)
		}
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

func TestHashes(t *testing.T) {
	// The runtime's precomputed keys (runtime/vdso_linux_amd64.go,
	// vdso_linux_arm64.go, vdsoLinuxVersion).
	assert.Equal(t, uint32(0xd35ec75), elfHash("__vdso_clock_gettime"))
	assert.Equal(t, uint32(0x6e43a318), gnuHash("__vdso_clock_gettime"))
	assert.Equal(t, uint32(0xb0cd725), elfHash("__kernel_clock_gettime"))
	assert.Equal(t, uint32(0xdfa941fd), gnuHash("__kernel_clock_gettime"))
	assert.Equal(t, uint32(0x3ae75f6), elfHash("LINUX_2.6"))
	assert.Equal(t, uint32(0x75fcb89), elfHash("LINUX_2.6.39"))
}
