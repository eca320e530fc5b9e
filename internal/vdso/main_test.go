package vdso

import (
	"fmt"
	"os"
	"testing"
)

// TestMain checks, before any test runs, that importing the package did
// nothing: no clock opened, no vDSO looked up.
func TestMain(m *testing.M) {
	for id := range opened {
		if opened[id].clock != nil || opened[id].err != nil {
			fmt.Fprintf(os.Stderr, "vdso: %v was opened before the first Open\n", ID(id))
			os.Exit(1)
		}
	}
	if resolvedBeforeMain() {
		fmt.Fprintln(os.Stderr, "vdso: the vDSO was looked up before the first Open")
		os.Exit(1)
	}
	os.Exit(m.Run())
}
