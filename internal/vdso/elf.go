package vdso

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// The symbol lookup below follows the Go runtime's own vDSO loader
// (runtime/vdso_linux.go and vdso_elf64.go, which follow the kernel's
// tools/testing/selftests/vDSO/parse_vdso.c): the first PT_LOAD gives the
// load bias, PT_DYNAMIC gives the dynamic table, and the dynamic table
// gives the symbol table, its strings and the symbol versions. It differs
// in two ways. The runtime trusts the image (the kernel made it) and
// indexes fixed-size arrays laid over memory; this version reads a []byte
// and checks every offset, size and index against it first, so that a
// malformed image (a fuzzer's, or a kernel's we have not seen) yields an
// error and never a panic or a read outside the slice. And it reads the
// symbol table in order rather than through a hash table: it looks one
// symbol up, once per process, in a table of a few dozen, so the tables
// (two kinds, each with its chains to bound) would cost more code than
// they save time. Every loop is bounded: by a strictly increasing offset,
// by a table's declared length or by the image's size.

// ELF constants (the System V gABI, "Dynamic Section" and "symbol
// Versioning" of the LSB).
const (
	elfClass64  = 2
	elfDataLSB  = 1
	elfHdrSize  = 64 // sizeof(Elf64_Ehdr)
	elfPhdrSize = 56 // sizeof(Elf64_Phdr)
	elfSymSize  = 24 // sizeof(Elf64_Sym)
	elfDynSize  = 16 // sizeof(Elf64_Dyn)

	elfMachineX8664   = 62
	elfMachineAArch64 = 183

	ptLoad    = 1
	ptDynamic = 2
	pfExecute = 1

	dtNull   = 0
	dtStrtab = 5
	dtSymtab = 6
	dtStrsz  = 10
	dtSyment = 11
	dtVersym = 0x6ffffff0
	dtVerdef = 0x6ffffffc

	verFlagBase = 1 // the version definition of the file itself
	shnUndef    = 0
	sttNotype   = 0
	sttFunc     = 2 // ppc64's vDSO functions are NOTYPE, hence both (the runtime's rule)
	stbGlobal   = 1
	stbWeak     = 2

	// maxVersionDefs bounds the version definitions read. The chain is
	// already bounded (each step moves forward), this only keeps a
	// fuzzer's image from costing a walk over every byte.
	maxVersionDefs = 1024
)

// Errors from the lookup. Each one is wrapped with the detail that
// failed; Path quotes the message.
var (
	errNotELF          = errors.New("vdso: not a 64-bit little-endian ELF image")
	errMalformed       = errors.New("vdso: malformed ELF image")
	errSymbolNotFound  = errors.New("vdso: symbol not found")
	errVersionNotFound = errors.New("vdso: symbol version not defined")
)

// symbol names a function in a vDSO image: the name and the version the
// symbol must carry, as the runtime's vdsoSymbolKeys and vdsoLinuxVersion
// do.
type symbol struct {
	name, version string
}

func (s symbol) String() string { return s.name + "@" + s.version }

// The clock_gettime of each architecture's vDSO, as the runtime names it
// (runtime/vdso_linux_amd64.go, vdso_linux_arm64.go).
var (
	symbolAMD64 = symbol{name: "__vdso_clock_gettime", version: "LINUX_2.6"}
	symbolARM64 = symbol{name: "__kernel_clock_gettime", version: "LINUX_2.6.39"}
)

// elfImage is a vDSO laid out as the kernel maps it: the whole shared
// object from file offset 0, so that a file offset is an index into data.
type elfImage struct {
	data    []byte
	machine uint16

	// loadBias turns a virtual address into an index into data: the
	// first PT_LOAD's p_offset - p_vaddr (the runtime's loadOffset less
	// the load address).
	loadVaddr, loadOffset uint64
	// exec holds the [start, end) index ranges of the executable PT_LOAD
	// segments: a symbol found outside them is not code we may call.
	exec [][2]uint64

	symtab, symCount uint64 // index of the symbol table and how many entries it may hold
	strtab, strEnd   uint64 // the string table is data[strtab:strEnd]
	versym           uint64 // index of DT_VERSYM, 0 when absent
	verdef           uint64 // index of DT_VERDEF, 0 when absent
	hasVersym        bool
	hasVerdef        bool
}

// lookupSymbol finds sym in a vDSO image (the bytes from its ELF header on) and
// returns the symbol's offset from the start of the image: the address to
// call is the image's base address plus that offset. The offset always
// lies inside an executable PT_LOAD segment of the image.
func lookupSymbol(image []byte, sym symbol) (uint64, error) {
	img, err := parseELF(image)
	if err != nil {
		return 0, err
	}
	return img.lookup(sym)
}

// imageMachine returns the image's e_machine (62 for x86-64, 183 for AArch64).
func imageMachine(image []byte) (uint16, error) {
	img, err := parseELF(image)
	if err != nil {
		return 0, err
	}
	return img.machine, nil
}

// le is the only byte order a vDSO we call can have (amd64, arm64).
var le = binary.LittleEndian

// span returns whether [off, off+size) lies inside data, without
// overflowing.
func span(data []byte, off, size uint64) bool {
	n := uint64(len(data))
	return off <= n && size <= n-off
}

func u16(d []byte, off uint64) uint16 { return le.Uint16(d[off:]) }
func u32(d []byte, off uint64) uint32 { return le.Uint32(d[off:]) }
func u64(d []byte, off uint64) uint64 { return le.Uint64(d[off:]) }

func malformed(what string, args ...any) error {
	return fmt.Errorf("%w: %s", errMalformed, fmt.Sprintf(what, args...))
}

// parseELF reads the headers and the dynamic table of image and checks
// that every table they name lies inside it.
func parseELF(image []byte) (*elfImage, error) {
	if len(image) < elfHdrSize || string(image[:4]) != "\x7fELF" {
		return nil, errNotELF
	}
	if image[4] != elfClass64 || image[5] != elfDataLSB {
		return nil, errNotELF
	}
	img := &elfImage{data: image, machine: u16(image, 18)}
	phoff := u64(image, 32)
	phentsize := uint64(u16(image, 54))
	phnum := uint64(u16(image, 56))
	if phentsize < elfPhdrSize {
		return nil, malformed("e_phentsize %d < %d", phentsize, elfPhdrSize)
	}
	if !span(image, phoff, phnum*phentsize) { // phnum, phentsize < 2^16: no overflow
		return nil, malformed("program headers [%#x, +%d×%d) outside the image of %d bytes", phoff, phnum, phentsize, len(image))
	}

	var foundLoad, foundDynamic bool
	var dynOff, dynSize uint64
	for i := uint64(0); i < phnum; i++ {
		ph := phoff + i*phentsize
		typ := u32(image, ph)
		flags := u32(image, ph+4)
		off, vaddr, filesz := u64(image, ph+8), u64(image, ph+16), u64(image, ph+32)
		switch typ {
		case ptLoad:
			if !span(image, off, filesz) {
				return nil, malformed("PT_LOAD [%#x, +%#x) outside the image", off, filesz)
			}
			if !foundLoad {
				// The runtime takes the first PT_LOAD as the one
				// that fixes the bias (vdsoInitFromSysinfoEhdr).
				foundLoad = true
				img.loadVaddr, img.loadOffset = vaddr, off
			}
			if flags&pfExecute != 0 {
				img.exec = append(img.exec, [2]uint64{off, off + filesz})
			}
		case ptDynamic:
			if !span(image, off, filesz) {
				return nil, malformed("PT_DYNAMIC [%#x, +%#x) outside the image", off, filesz)
			}
			dynOff, dynSize, foundDynamic = off, filesz, true
		}
	}
	if !foundLoad {
		return nil, malformed("no PT_LOAD")
	}
	if !foundDynamic {
		return nil, malformed("no PT_DYNAMIC")
	}

	var strsz, syment uint64
	var hasStrsz, hasStrtab, hasSymtab bool
	for d := dynOff; d+elfDynSize <= dynOff+dynSize; d += elfDynSize {
		tag, val := u64(image, d), u64(image, d+8)
		if tag == dtNull {
			break
		}
		switch tag {
		case dtStrsz:
			strsz, hasStrsz = val, true
			continue
		case dtSyment:
			syment = val
			continue
		case dtStrtab, dtSymtab, dtVersym, dtVerdef:
		default:
			continue
		}
		off, ok := img.index(val)
		if !ok {
			return nil, malformed("dynamic tag %#x: address %#x outside the image", tag, val)
		}
		switch tag {
		case dtStrtab:
			img.strtab, hasStrtab = off, true
		case dtSymtab:
			img.symtab, hasSymtab = off, true
		case dtVersym:
			img.versym, img.hasVersym = off, true
		case dtVerdef:
			img.verdef, img.hasVerdef = off, true
		}
	}
	if !hasStrtab || !hasSymtab {
		return nil, malformed("dynamic table lacks DT_STRTAB or DT_SYMTAB")
	}
	if syment != 0 && syment != elfSymSize {
		return nil, malformed("DT_SYMENT %d, want %d", syment, elfSymSize)
	}
	img.strEnd = uint64(len(image))
	if hasStrsz && span(image, img.strtab, strsz) {
		img.strEnd = img.strtab + strsz
	}
	// The symbol table runs to the string table where that follows it
	// (as the linker lays a vDSO out), to the end of the image otherwise.
	end := uint64(len(image))
	if img.strtab > img.symtab {
		end = img.strtab
	}
	img.symCount = (end - img.symtab) / elfSymSize
	if !img.hasVerdef {
		// Without definitions a version index means nothing; the
		// runtime drops versym too.
		img.hasVersym = false
	}
	return img, nil
}

// index turns a virtual address of the image into an index into data.
func (img *elfImage) index(vaddr uint64) (uint64, bool) {
	if vaddr < img.loadVaddr {
		return 0, false
	}
	off := vaddr - img.loadVaddr
	if off > ^uint64(0)-img.loadOffset {
		return 0, false
	}
	off += img.loadOffset
	return off, off < uint64(len(img.data))
}

// str returns the NUL-terminated string at index off of the string
// table, or false when it does not end inside the table.
func (img *elfImage) str(off uint64) (string, bool) {
	if off >= img.strEnd-img.strtab {
		return "", false
	}
	start := img.strtab + off
	for i := start; i < img.strEnd; i++ {
		if img.data[i] == 0 {
			return string(img.data[start:i]), true
		}
	}
	return "", false
}

// version returns the index of the version definition named ver: 0 when
// the image defines no versions (no check), -1 when it defines others
// only (no symbol can match), as the runtime's vdsoFindVersion does.
func (img *elfImage) version(ver string) (int32, error) {
	if !img.hasVerdef {
		return 0, nil
	}
	def := img.verdef
	for range maxVersionDefs {
		// Elf64_Verdef: version u16, flags u16, ndx u16, cnt u16, hash
		// u32, aux u32, next u32.
		if !span(img.data, def, 20) {
			return 0, malformed("version definition at %#x outside the image", def)
		}
		flags, ndx := u16(img.data, def+2), u16(img.data, def+4)
		aux, next := uint64(u32(img.data, def+12)), uint64(u32(img.data, def+16))
		if flags&verFlagBase == 0 {
			// Elf64_Verdaux: name u32, next u32.
			if !span(img.data, def+aux, 8) {
				return 0, malformed("version name at %#x outside the image", def+aux)
			}
			if name, ok := img.str(uint64(u32(img.data, def+aux))); ok && name == ver {
				return int32(ndx & 0x7fff), nil
			}
		}
		if next == 0 {
			return -1, nil
		}
		def += next // moves forward: the walk ends by the image's size
	}
	return -1, nil
}

// lookup reads the symbol table in order for sym, checking each entry
// as the runtime's vdsoParseSymbols does.
func (img *elfImage) lookup(sym symbol) (uint64, error) {
	ver, err := img.version(sym.version)
	if err != nil {
		return 0, err
	}
	for i := uint64(1); i < img.symCount; i++ { // entry 0 is the undefined symbol
		if off, ok, err := img.match(i, sym, ver); err != nil || ok {
			return off, err
		}
	}
	return 0, img.notFound(sym, ver)
}

func (img *elfImage) notFound(sym symbol, ver int32) error {
	if ver < 0 {
		return fmt.Errorf("%w: %s", errVersionNotFound, sym)
	}
	return fmt.Errorf("%w: %s", errSymbolNotFound, sym)
}

// match checks symbol i against sym: a defined global or weak function
// (or untyped symbol) of that name and version, whose address lies in an
// executable segment.
func (img *elfImage) match(i uint64, sym symbol, ver int32) (uint64, bool, error) {
	s := img.symtab + i*elfSymSize
	// Elf64_Sym: name u32, info u8, other u8, shndx u16, value u64, size u64.
	name, info, shndx, value := u32(img.data, s), img.data[s+4], u16(img.data, s+6), u64(img.data, s+8)
	typ, bind := info&0xf, info>>4
	if typ != sttFunc && typ != sttNotype || bind != stbGlobal && bind != stbWeak || shndx == shnUndef {
		return 0, false, nil
	}
	if n, ok := img.str(uint64(name)); !ok || n != sym.name {
		return 0, false, nil
	}
	if img.hasVersym && ver != 0 {
		vs := img.versym + 2*i
		if !span(img.data, vs, 2) {
			return 0, false, malformed("version of symbol %d outside the image", i)
		}
		if int32(u16(img.data, vs)&0x7fff) != ver {
			return 0, false, nil
		}
	}
	off, ok := img.index(value)
	if !ok {
		return 0, false, malformed("%s at %#x outside the image", sym, value)
	}
	for _, seg := range img.exec {
		if seg[0] <= off && off < seg[1] {
			return off, true, nil
		}
	}
	return 0, false, malformed("%s at %#x outside every executable segment", sym, value)
}
