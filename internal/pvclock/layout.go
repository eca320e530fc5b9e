package pvclock

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// PageSize is x86's base page size, the unit of the vvar layouts.
const PageSize = 4096

// Mapping is one line of /proc/self/maps.
type Mapping struct {
	Lo, Hi uint64
	Perms  string
	Name   string // the pathname field: "[vvar]", "[vvar_vclock]", a file, or ""
}

// ParseMapsLine parses "lo-hi perms offset dev inode [pathname]", the
// format of show_map_vma (fs/proc/task_mmu.c). The pathname is the rest
// of the line after the inode and its padding (a file name may hold
// spaces). ok is false for anything else.
func ParseMapsLine(line string) (m Mapping, ok bool) {
	rest := line
	var fields [5]string
	for i := range fields {
		var found bool
		fields[i], rest, found = strings.Cut(strings.TrimLeft(rest, " "), " ")
		if !found && i != len(fields)-1 {
			return Mapping{}, false
		}
	}
	loText, hiText, found := strings.Cut(fields[0], "-")
	lo, err1 := strconv.ParseUint(loText, 16, 64)
	hi, err2 := strconv.ParseUint(hiText, 16, 64)
	if !found || err1 != nil || err2 != nil || lo >= hi || len(fields[1]) != 4 || fields[4] == "" {
		return Mapping{}, false
	}
	return Mapping{Lo: lo, Hi: hi, Perms: fields[1], Name: strings.TrimLeft(rest, " ")}, true
}

// ParseMaps parses every line of a /proc/self/maps, skipping those that
// are not mappings.
func ParseMaps(maps string) []Mapping {
	var out []Mapping
	for line := range strings.Lines(maps) {
		if m, ok := ParseMapsLine(strings.TrimSuffix(line, "\n")); ok {
			out = append(out, m)
		}
	}
	return out
}

// Location is where the clock pages are in this process; an address of 0
// means the layout has no such page.
type Location struct {
	Pvclock, Hyperv uint64
	Mapping         string // the mapping's name, "[vvar_vclock]" or "[vvar]"
	Layout          string // which kernel layout, for the evidence
}

// Release is a kernel version, from uname's release ("6.18.44-fc-v1294").
type Release struct{ Major, Minor int }

// ParseRelease reads "major.minor" at the start of a kernel release.
func ParseRelease(s string) (Release, bool) {
	dot := strings.IndexByte(s, '.')
	if dot < 0 {
		return Release{}, false
	}
	end := dot + 1
	for end < len(s) && '0' <= s[end] && s[end] <= '9' {
		end++
	}
	major, err1 := strconv.ParseUint(s[:dot], 10, 64)
	minor, err2 := strconv.ParseUint(s[dot+1:end], 10, 64)
	if err1 != nil || err2 != nil || major > math.MaxInt32 || minor > math.MaxInt32 {
		return Release{}, false
	}
	return Release{int(major), int(minor)}, true
}

func (r Release) atLeast(major, minor int) bool {
	return r.Major > major || r.Major == major && r.Minor >= minor
}

func (r Release) String() string { return fmt.Sprintf("%d.%d", r.Major, r.Minor) }

// The layouts, each checked against the kernel source of its versions
// (torvalds/linux, arch/x86/entry/vdso/):
//
//   - Linux 6.13 and later (the generic vDSO data store): the vclock
//     pages are a mapping of their own, "[vvar_vclock]",
//     VDSO_NR_VCLOCK_PAGES = 2 pages: VDSO_PAGE_PVCLOCK_OFFSET 0,
//     VDSO_PAGE_HVCLOCK_OFFSET 1 (vdso-layout.lds.S: pvclock_page =
//     vclock_pages + VDSO_PAGE_PVCLOCK_OFFSET * PAGE_SIZE; vma.c
//     installs vvar_vclock_mapping). [vvar] then holds the data pages
//     only, so its size says nothing about the vclock pages.
//   - Linux 5.6 (time namespaces) to 6.12: one "[vvar]" mapping of
//     4 pages, vvar_start = . - 4 * PAGE_SIZE: vvar_page +0,
//     pvclock_page +1, hvclock_page +2, timens_page +3 (6.11's
//     asm/vvar.h names them VVAR_PAGE_OFFSET 0, PVCLOCK_PAGE_OFFSET 1,
//     HVCLOCK_PAGE_OFFSET 2, TIMENS_PAGE_OFFSET 3).
//   - Older kernels had 2- to 4-page [vvar] mappings in more than one
//     order (an HPET page before the pvclock page in 4.x, no hvclock
//     page before 4.14): the same size does not mean the same order,
//     so they are refused rather than guessed.
const (
	vclockPages     = 2
	timensVvarPages = 4
)

// Locate finds the clock pages among maps on a kernel of the given
// release. It never reads them: see Probe.
func Locate(maps []Mapping, release string) (Location, error) {
	rel, relOK := ParseRelease(release)
	for _, m := range maps {
		if m.Name != "[vvar_vclock]" {
			continue
		}
		if m.Hi-m.Lo != vclockPages*PageSize {
			return Location{}, fmt.Errorf("%w: [vvar_vclock] is %d bytes, want %d pages (Linux 6.13+: pvclock, hvclock)", ErrLayout, m.Hi-m.Lo, vclockPages)
		}
		return Location{Pvclock: m.Lo, Hyperv: m.Lo + PageSize, Mapping: m.Name,
			Layout: "[vvar_vclock] (Linux 6.13+): pvclock page +0, hvclock page +1"}, nil
	}
	if !relOK {
		return Location{}, fmt.Errorf("%w: no [vvar_vclock] mapping, and kernel release %q cannot be parsed to choose a [vvar] layout", ErrLayout, release)
	}
	if rel.atLeast(6, 13) {
		return Location{}, fmt.Errorf("%w: no [vvar_vclock] mapping on Linux %s (since 6.13 the kernel maps the vclock pages there)", ErrNoPage, rel)
	}
	if !rel.atLeast(5, 6) {
		return Location{}, fmt.Errorf("%w: Linux %s predates the [vvar] layouts verified here (5.6 to 6.12)", ErrLayout, rel)
	}
	for _, m := range maps {
		if m.Name != "[vvar]" {
			continue
		}
		if m.Hi-m.Lo != timensVvarPages*PageSize {
			return Location{}, fmt.Errorf("%w: [vvar] on Linux %s is %d bytes, want %d pages (vvar, pvclock, hvclock, timens)", ErrLayout, rel, m.Hi-m.Lo, timensVvarPages)
		}
		return Location{Pvclock: m.Lo + PageSize, Hyperv: m.Lo + 2*PageSize, Mapping: m.Name,
			Layout: "[vvar] (Linux 5.6-6.12): pvclock page +1, hvclock page +2"}, nil
	}
	return Location{}, fmt.Errorf("%w: no [vvar] mapping (no vDSO in this process)", ErrNoPage)
}
