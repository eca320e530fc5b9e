package vdso

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

const atSysinfoEhdr = 33 // AT_SYSINFO_EHDR: the address of the vDSO's ELF header

// errNoVDSO: the auxiliary vector has no AT_SYSINFO_EHDR (qemu-user
// before version 8, a kernel booted with vdso=0, ...).
var errNoVDSO = errors.New("no vDSO: AT_SYSINFO_EHDR absent")

// sysinfoEhdr returns the vDSO's address from the auxiliary vector:
// unix.Auxv (the runtime's copy, made at startup) or, where the runtime
// has none to give (some build modes and sandboxes), /proc/self/auxv.
func sysinfoEhdr() (uintptr, error) {
	auxv, err := unix.Auxv()
	if err != nil {
		raw, rerr := os.ReadFile("/proc/self/auxv")
		if rerr != nil {
			return 0, fmt.Errorf("auxiliary vector unreadable: %v; %v", err, rerr)
		}
		auxv = parseAuxv(raw)
	}
	return findSysinfoEhdr(auxv)
}

// parseAuxv reads /proc/self/auxv: pairs of native words, up to AT_NULL.
func parseAuxv(raw []byte) [][2]uintptr {
	const word = int(unsafe.Sizeof(uintptr(0)))
	var out [][2]uintptr
	for len(raw) >= 2*word {
		var tag, val uintptr
		if word == 8 {
			tag, val = uintptr(binary.NativeEndian.Uint64(raw)), uintptr(binary.NativeEndian.Uint64(raw[8:]))
		} else {
			tag, val = uintptr(binary.NativeEndian.Uint32(raw)), uintptr(binary.NativeEndian.Uint32(raw[4:]))
		}
		if tag == 0 { // AT_NULL
			break
		}
		out = append(out, [2]uintptr{tag, val})
		raw = raw[2*word:]
	}
	return out
}

func findSysinfoEhdr(auxv [][2]uintptr) (uintptr, error) {
	for _, kv := range auxv {
		if kv[0] == atSysinfoEhdr && kv[1] != 0 {
			return kv[1], nil
		}
	}
	return 0, errNoVDSO
}

// How much of the memory at AT_SYSINFO_EHDR may be read. The kernel maps
// the whole vDSO shared object there, file offset 0 at the ELF header, so
// the image's own headers say how long it is: the ELF header is at the
// start of a mapping (the auxiliary vector says so), and the runtime
// already read it, the program headers, the dynamic table and the symbol
// tables through the same address at startup (runtime/vdso_linux.go,
// vdsoauxv), so reading the program headers cannot fault if they lie in
// the first page (4096 bytes: no Linux page is smaller). The image is
// then the extent of its PT_LOAD segments: every table the lookup reads
// lies inside them (the lookup checks it) and the kernel maps them
// whole. mincore(2) then proves every page of that extent mapped, in one
// system call; where it cannot answer (a seccomp filter that forbids
// it), the headers are trusted as the runtime trusts them. (Reading
// /proc/self/maps instead would cost the first Raw, Boottime or wall
// clock read of a process far more: the kernel writes out every mapping
// of the process.)
//
// The length is capped at maxImage in any case: a vDSO is a few pages.
const (
	minPage  = 4096
	maxImage = 1 << 20
)

// liveImage returns the vDSO's address and a copy of its image: parsing a
// copy keeps every later read of it in Go memory.
func liveImage() (uintptr, []byte, error) {
	base, err := sysinfoEhdr()
	if err != nil {
		return 0, nil, err
	}
	n, err := imageLength(memory(base, elfHdrSize), func(off, size uint64) []byte {
		return memory(base+uintptr(off), uintptr(size))
	})
	if err != nil {
		return 0, nil, err
	}
	if mapped, known := mappedFor(base, uintptr(n)); known && !mapped {
		return 0, nil, fmt.Errorf("%w: the headers claim %d bytes, not all of them mapped (mincore)", errMalformed, n)
	}
	return base, bytes.Clone(memory(base, uintptr(n))), nil
}

// memory views n bytes of this process's memory at addr, memory that Go
// does not manage (the vDSO's read-only pages).
func memory(addr, n uintptr) []byte {
	return unsafe.Slice((*byte)(unsafe.Add(unsafe.Pointer(nil), addr)), n)
}

// imageLength derives the image's length from its ELF header (hdr, 64
// bytes) and program headers, read through phdrs(off, size) only once
// they are known to lie in the first page.
func imageLength(hdr []byte, phdrs func(off, size uint64) []byte) (uint64, error) {
	if string(hdr[:4]) != "\x7fELF" || hdr[4] != elfClass64 || hdr[5] != elfDataLSB {
		return 0, errNotELF
	}
	phoff, phentsize, phnum := le.Uint64(hdr[32:]), uint64(le.Uint16(hdr[54:])), uint64(le.Uint16(hdr[56:]))
	if phentsize < elfPhdrSize || phoff > minPage || phnum*phentsize > minPage-phoff {
		return 0, malformed("program headers [%#x, +%d×%d) not in the first page", phoff, phnum, phentsize)
	}
	table := phdrs(phoff, phnum*phentsize)
	var n uint64
	for i := uint64(0); i < phnum; i++ {
		ph := table[i*phentsize:]
		if le.Uint32(ph) != ptLoad {
			continue
		}
		off, filesz := le.Uint64(ph[8:]), le.Uint64(ph[32:])
		if off > maxImage || filesz > maxImage-off {
			return 0, malformed("PT_LOAD [%#x, +%#x) beyond %d bytes", off, filesz, maxImage)
		}
		n = max(n, off+filesz)
	}
	if n < elfHdrSize {
		return 0, malformed("no PT_LOAD covers the ELF header")
	}
	return n, nil
}

// mappedFor reports whether every page of [addr, addr+n) is mapped, by
// mincore(2), which fails with ENOMEM on a range with a hole. known is
// false where mincore answers anything else (a seccomp filter that
// forbids it).
func mappedFor(addr, n uintptr) (mapped, known bool) {
	const page = minPage
	lo := addr &^ (page - 1)
	pages := (addr + n - lo + page - 1) / page
	var vec [maxImage / minPage]byte
	if pages == 0 || pages > uintptr(len(vec)) {
		return false, false
	}
	_, _, errno := unix.Syscall(unix.SYS_MINCORE, lo, pages*page, uintptr(unsafe.Pointer(&vec[0])))
	switch errno {
	case 0:
		return true, true
	case unix.ENOMEM:
		return false, true
	}
	return false, false
}
