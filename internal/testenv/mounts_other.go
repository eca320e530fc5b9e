//go:build !linux

package testenv

import "testing"

// WithFiles runs f in a private mount namespace where files read as
// given (see the Linux version); elsewhere t skips: only Linux has the
// namespaces, and only Linux has the files it is for.
func WithFiles(t testing.TB, files map[string]string, f func()) {
	t.Helper()
	t.Skip("needs Linux's mount namespaces")
}
