//go:build linux

package vdso

import (
	"bytes"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestDumpLiveImage writes this process's vDSO to $VDSO_DUMP_DIR (the
// fuzz seeds in testdata were made so): the whole mapping when
// /proc/self/maps gives it (section headers included, so readelf can
// read the file), else the PT_LOAD extent liveImage reads.
func TestDumpLiveImage(t *testing.T) {
	dir := os.Getenv("VDSO_DUMP_DIR")
	if dir == "" {
		t.Skip("set VDSO_DUMP_DIR to write the live vDSO image there")
	}
	base, image, err := liveImage()
	require.NoError(t, err)
	if end, ok := mappingEnd(base); ok && end > base {
		image = bytes.Clone(memory(base, end-base))
	}
	name := filepath.Join(dir, "vdso_linux_"+runtime.GOARCH+".so")
	require.NoError(t, os.WriteFile(name, image, 0o644))
	t.Logf("wrote %d bytes to %s", len(image), name)
}
