//go:build !amd64

package main

import (
	"errors"
	"runtime"
)

// templexxxTSC: github.com/templexxx/tsc v0.0.3 does not build outside
// amd64 (its tsc_generic.go declares GetInOrder twice), so it is not
// imported here.
func templexxxTSC() clock {
	return clock{
		name: "templexxx/tsc.UnixNano",
		open: func() (func() int64, error) {
			return nil, errors.New("v0.0.3 does not build on " + runtime.GOARCH + " (tsc_generic.go declares GetInOrder twice)")
		},
	}
}
