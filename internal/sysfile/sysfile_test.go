package sysfile

import (
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestRead(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f")
	content := make([]byte, 100_000) // past io.ReadAll's first buffer
	for i := range content {
		content[i] = byte(i)
	}
	require.NoError(t, os.WriteFile(path, content, 0o644))
	got, err := Read(path)
	require.NoError(t, err)
	assert.Equal(t, content, got)

	_, err = Read(filepath.Join(t.TempDir(), "missing"))
	assert.ErrorIs(t, err, fs.ErrNotExist)
}
