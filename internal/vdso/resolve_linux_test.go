package vdso

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

func resolvedBeforeMain() bool { return live.path != "" }

// runtimeSeesVDSOPage says whether the runtime's inVDSOPage covers this
// process's vDSO. The runtime takes the page as starting at the load
// address plus the first PT_LOAD's p_offset - p_vaddr
// (runtime/vdso_linux.go, vdsoInitFromSysinfoEhdr): right for a kernel's
// image, linked at 0, wrong for qemu 10's, whose program headers carry
// the address it was relocated to. There sigprof charges vDSO samples to
// _ExternalCode, and sigFetchG never reads the g slot.
func runtimeSeesVDSOPage() bool {
	_, image, err := liveImage()
	if err != nil {
		return false
	}
	img, err := parseELF(image)
	return err == nil && img.loadVaddr == img.loadOffset
}

var allClocks = []ID{Realtime, Monotonic, MonotonicRaw, MonotonicCoarse, Boottime}

// bracket checks, n times in a row, that read() lies between two
// clock_gettime system calls of clock id.
func bracket(t *testing.T, id ID, n int, read func() int64) {
	t.Helper()
	var ts unix.Timespec
	outside := 0
	var first string
	for i := range n {
		require.NoError(t, unix.ClockGettime(int32(id), &ts))
		before := ts.Nano()
		now := read()
		require.NoError(t, unix.ClockGettime(int32(id), &ts))
		after := ts.Nano()
		if now < before || now > after {
			if outside == 0 {
				first = fmt.Sprintf("reading %d: %d ≤ %d ≤ %d fails", i, before, now, after)
			}
			outside++
		}
	}
	assert.Zero(t, outside, "%v: %d of %d readings outside the system calls' bracket; first: %s", id, outside, n, first)
}

// TestBracket: every clock, through the path Open chose, reads between
// two system calls of the same clock, 2000 times in a row.
func TestBracket(t *testing.T) {
	for _, id := range allClocks {
		t.Run(id.String(), func(t *testing.T) {
			c, err := Open(id)
			if errors.Is(err, ErrUnsupported) {
				t.Skip(err)
			}
			require.NoError(t, err)
			t.Log(c.Path())
			bracket(t, id, 2000, c.Now)
		})
	}
}

// Where the vDSO has no usable clock_gettime, the reason is the path and
// the clock reads through the system call, within the same bracket.
func TestRefusedVDSOFallsBackToTheSystemCall(t *testing.T) {
	amd64 := readImage(t, "vdso_linux_amd64.so")
	arm64 := readImage(t, "vdso_linux_arm64.so")
	ok := func() error { return nil }
	const base = 0x7f000000 // an address any GOARCH can hold
	cases := []struct {
		name    string
		image   []byte
		arch    string
		check   func() error
		path    string
		callIt  bool
		entryAt uint64
	}{
		{"amd64", amd64, "amd64", ok, "vDSO __vdso_clock_gettime (LINUX_2.6)", true, 0xb10},
		{"arm64", arm64, "arm64", ok, "vDSO __kernel_clock_gettime (LINUX_2.6.39)", true, 0x4c8},
		{"no caller for the arch", amd64, "386", ok, "system call (no vDSO caller for linux/386)", false, 0},
		{"another machine's image", arm64, "amd64", ok, "system call (vDSO is for e_machine 183, not amd64)", false, 0},
		{"symbol missing", replaceAll(t, amd64, "__vdso_clock_gettime\x00", "__vdso_clock_gettimX\x00"), "amd64", ok, "system call (vDSO unusable: vdso: symbol not found: __vdso_clock_gettime@LINUX_2.6)", false, 0},
		{"version missing", replaceAll(t, arm64, "LINUX_2.6.39\x00", "LINUX_9.9.99\x00"), "arm64", ok, "system call (vDSO unusable: vdso: symbol version not defined: __kernel_clock_gettime@LINUX_2.6.39)", false, 0},
		{"malformed", amd64[:0x400], "amd64", ok, "system call (vDSO unusable: vdso: malformed ELF image", false, 0},
		{"not ELF", make([]byte, 4096), "amd64", ok, "system call (vDSO unusable: vdso: not a 64-bit little-endian ELF image)", false, 0},
		{"caller check fails", arm64, "arm64", func() error { return errGSlotTest }, "system call (vDSO found, caller unverified: the test's refusal)", false, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			entry, path := entryIn(base, tc.image, tc.arch, tc.check)
			assert.True(t, strings.HasPrefix(path, tc.path), "path %q, want %q", path, tc.path)
			if tc.callIt {
				assert.Equal(t, uintptr(base+tc.entryAt), entry)
				return
			}
			require.Zero(t, entry)
			c, err := openClock(MonotonicRaw, func() (uintptr, string) { return entry, path })
			require.NoError(t, err)
			assert.Equal(t, path, c.Path())
			bracket(t, MonotonicRaw, 2000, c.Now)
		})
	}
}

var errGSlotTest = errors.New("the test's refusal")

// A process without AT_SYSINFO_EHDR (qemu-user 7.2) reads through the
// system call and says so.
func TestNoVDSO(t *testing.T) {
	_, err := findSysinfoEhdr([][2]uintptr{{6, 4096}, {atSysinfoEhdr, 0}, {25, 0x1234}})
	assert.ErrorIs(t, err, errNoVDSO)
	c, err := openClock(Boottime, func() (uintptr, string) { return 0, "system call (" + errNoVDSO.Error() + ")" })
	require.NoError(t, err)
	assert.Equal(t, "system call (no vDSO: AT_SYSINFO_EHDR absent)", c.Path())
	bracket(t, Boottime, 2000, c.Now)
}

// The forced system call and the vDSO give the same clock: each reading
// of one lies between two of the other.
func TestSystemCallPathAgrees(t *testing.T) {
	for _, id := range allClocks {
		c, err := Open(id)
		if errors.Is(err, ErrUnsupported) {
			t.Logf("%v: %v", id, err)
			continue
		}
		require.NoError(t, err)
		s := SyscallClock(c)
		outside := 0
		for range 2000 {
			a, b, d := c.Now(), s.Now(), c.Now()
			if b < a || b > d {
				outside++
			}
			a, b, d = s.Now(), c.Now(), s.Now()
			if b < a || b > d {
				outside++
			}
		}
		assert.Zero(t, outside, "%v: %d of 4000 readings (%s against the system call) out of order", id, outside, c.Path())
	}
}

// Open's paths on this machine: the vDSO when there is one and a caller
// for this build, else the reason.
func TestPathHere(t *testing.T) {
	base, err := sysinfoEhdr()
	for _, id := range allClocks {
		c, oerr := Open(id)
		require.NoError(t, oerr, id.String())
		t.Logf("%v: %s", id, c.Path())
		switch {
		case !callerBuilt:
			assert.Equal(t, "system call ("+noCallerReason()+")", c.Path())
		case err != nil:
			assert.Equal(t, "system call (no vDSO: AT_SYSINFO_EHDR absent)", c.Path())
		default:
			assert.True(t, strings.HasPrefix(c.Path(), "vDSO "), "%v: %s, with a vDSO at %#x", id, c.Path(), base)
			assert.NotZero(t, c.entry)
		}
	}
}

func TestParseAuxv(t *testing.T) {
	var raw []byte
	for _, kv := range [][2]uint64{{6, 4096}, {atSysinfoEhdr, 0x7fff0000}, {0, 0}, {atSysinfoEhdr, 1}} {
		if unsafe.Sizeof(uintptr(0)) == 8 {
			raw = binary.NativeEndian.AppendUint64(raw, kv[0])
			raw = binary.NativeEndian.AppendUint64(raw, kv[1])
		} else {
			raw = binary.NativeEndian.AppendUint32(raw, uint32(kv[0]))
			raw = binary.NativeEndian.AppendUint32(raw, uint32(kv[1]))
		}
	}
	auxv := parseAuxv(raw)
	assert.Equal(t, [][2]uintptr{{6, 4096}, {atSysinfoEhdr, 0x7fff0000}}, auxv, "stops at AT_NULL")
	assert.Empty(t, parseAuxv(raw[:5]))
	// The file and x/sys agree here.
	file, err := os.ReadFile("/proc/self/auxv")
	require.NoError(t, err)
	fromFile, ferr := findSysinfoEhdr(parseAuxv(file))
	fromSys, serr := sysinfoEhdr()
	assert.Equal(t, fromSys, fromFile)
	assert.Equal(t, serr == nil, ferr == nil)
}

func TestImageLength(t *testing.T) {
	for _, ti := range testImages {
		image := readImage(t, ti.file)
		n, err := imageLength(image[:elfHdrSize], func(off, size uint64) []byte { return image[off : off+size] })
		require.NoError(t, err)
		img, err := parseELF(image[:n])
		require.NoError(t, err, "%s: the length from the headers holds every table", ti.file)
		_, err = img.lookup(ti.sym)
		require.NoError(t, err)
		t.Logf("%s: %d bytes of %d", ti.file, n, len(image))
	}
	image := readImage(t, "vdso_linux_amd64.so")
	cut := func(mutate func(b []byte)) error {
		b := append([]byte(nil), image...)
		mutate(b)
		_, err := imageLength(b[:elfHdrSize], func(off, size uint64) []byte { return b[off : off+size] })
		return err
	}
	assert.ErrorIs(t, cut(func(b []byte) { b[0] = 0 }), errNotELF)
	assert.ErrorIs(t, cut(func(b []byte) { binary.LittleEndian.PutUint64(b[32:], 4000) }), errMalformed, "program headers past the first page")
	assert.ErrorIs(t, cut(func(b []byte) { binary.LittleEndian.PutUint16(b[56:], 0xffff) }), errMalformed, "too many program headers")
	assert.ErrorIs(t, cut(func(b []byte) { binary.LittleEndian.PutUint64(b[64+32:], 1<<40) }), errMalformed, "a PT_LOAD of 1 TiB")
}

// The live image: inside the mapping /proc/self/maps shows, and its
// clock_gettime where entryIn says.
func TestLiveImage(t *testing.T) {
	base, image, err := liveImage()
	if errors.Is(err, errNoVDSO) {
		t.Skip(err)
	}
	require.NoError(t, err)
	end, ok := mappingEnd(base)
	require.True(t, ok, "/proc/self/maps")
	assert.LessOrEqual(t, uint64(len(image)), uint64(end-base))
	m, err := imageMachine(image)
	require.NoError(t, err)
	t.Logf("vDSO at %#x: %d bytes, e_machine %d, mapping ends at %#x", base, len(image), m, end)
	if runtime.GOARCH == "amd64" || runtime.GOARCH == "arm64" {
		entry, path := entryIn(base, image, runtime.GOARCH, func() error { return nil })
		assert.NotZero(t, entry, path)
	}
}

// TestMappedFor: mincore's answer agrees with /proc/self/maps on the
// vDSO's mapping: all of it mapped, and a range that runs a page past
// its end mapped only if /proc/self/maps maps that page too.
func TestMappedFor(t *testing.T) {
	base, image, err := liveImage()
	if errors.Is(err, errNoVDSO) {
		t.Skip(err)
	}
	require.NoError(t, err)
	mapped, known := mappedFor(base, uintptr(len(image)))
	require.True(t, known, "mincore")
	assert.True(t, mapped, "the vDSO's image")
	end, ok := mappingEnd(base)
	require.True(t, ok, "/proc/self/maps")
	beyond, known := mappedFor(base, end-base+minPage)
	require.True(t, known)
	next, _ := mappingEnd(end) // end itself when no mapping holds it
	assert.Equal(t, next > end, beyond, "the page after the vDSO's mapping")
}
