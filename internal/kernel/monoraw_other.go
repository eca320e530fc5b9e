//go:build !linux && !darwin

package kernel

import "errors"

// HasMonotonicRaw reports whether this system has CLOCK_MONOTONIC_RAW.
const HasMonotonicRaw = false

// MonotonicRaw has no CLOCK_MONOTONIC_RAW to read here.
func MonotonicRaw() (ns int64, err error) { return 0, errors.ErrUnsupported }
