//go:build !gc || purego || !(amd64 || arm64 || riscv64 || ppc64le || s390x || loong64)

package schedclock

// A build that reads no counter register in assembly: see source_readers.go.
const asmBuild = false

var asm asmReaders
