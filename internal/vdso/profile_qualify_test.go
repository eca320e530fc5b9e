package vdso_test

import (
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"runtime"
	"runtime/pprof"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/schedclock/schedclock/internal/testenv"
	"github.com/schedclock/schedclock/internal/vdso"
)

// deep recurses depth frames of 256 bytes of locals, reading the clock
// in each: the goroutine's stack grows (and the GC shrinks it again)
// with calls into the vDSO on either side of every move.
//
//go:noinline
func (r *readInOrder) deep(depth int) uintptr {
	var pad [32]uintptr
	now := r.c.Now()
	if now < r.prev {
		r.inversions++
	}
	r.prev = now
	pad[depth%32] = uintptr(now)
	if depth > 0 {
		pad[(depth+1)%32] = r.deep(depth - 1)
	}
	r.reads++
	return pad[depth%32] ^ pad[(depth+1)%32]
}

// churn loads the runtime while readers run: heap allocation with forced
// GCs (which shrink stacks) and short-lived goroutines that must grow
// their stacks for the call's frame.
func churn(stop *atomic.Bool, c *vdso.Clock, wg *sync.WaitGroup) {
	wg.Add(2)
	go func() {
		defer wg.Done()
		ring := make([][]byte, 256)
		rng := rand.New(rand.NewPCG(3, 4))
		for i := 0; !stop.Load(); i++ {
			ring[i%len(ring)] = make([]byte, 64+rng.IntN(64<<10))
			if i%20000 == 0 {
				runtime.GC()
			}
		}
	}()
	go func() {
		defer wg.Done()
		for !stop.Load() {
			var inner sync.WaitGroup
			for range 16 {
				inner.Go(func() {
					r := readInOrder{c: c, prev: c.Now()}
					r.deep(8)
				})
			}
			inner.Wait()
		}
	}()
}

// TestProfileUnderLoad: readers on every P (at least four) for 2 s under
// the CPU profiler, with heap, GC and stack churn: no crash, no reading
// out of order, and a profile with samples in it, those in the vDSO
// charged to runtime._VDSO. A stress test of seconds: the qualification
// layer's.
func TestProfileUnderLoad(t *testing.T) {
	testenv.Qualify(t)
	c, err := vdso.Open(vdso.MonotonicRaw)
	require.NoError(t, err)
	var prof bytes.Buffer
	require.NoError(t, pprof.StartCPUProfile(&prof))
	var stop atomic.Bool
	var wg sync.WaitGroup
	churn(&stop, c, &wg)
	readers := make([]readInOrder, max(4, runtime.GOMAXPROCS(0)))
	for i := range readers {
		r := &readers[i]
		r.c, r.prev = c, c.Now()
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(i), 5))
			for !stop.Load() {
				r.batch()
				if rng.IntN(64) == 0 {
					r.deep(64 + rng.IntN(512))
				}
			}
		})
	}
	time.Sleep(churnDuration)
	stop.Store(true)
	wg.Wait()
	pprof.StopCPUProfile()

	var reads int64
	for i, r := range readers {
		assert.Zero(t, r.inversions, "reader %d: %d of %d readings went backwards", i, r.inversions, r.reads)
		reads += r.reads
	}
	require.NotZero(t, prof.Len(), "no profile written")
	leaves, err := profileLeaves(prof.Bytes())
	require.NoError(t, err)
	total, inVDSO, inCall, external := 0, leaves["runtime._VDSO"], 0, leaves["runtime._ExternalCode"]
	for fn, n := range leaves {
		total += n
		if strings.HasSuffix(fn, "vdso.callClockGettime") {
			inCall += n
		}
	}
	t.Logf("%d readings by %d readers (%s); %d samples: %d in runtime._VDSO, %d in runtime._ExternalCode, %d in callClockGettime; top: %s",
		reads, len(readers), c.Path(), total, inVDSO, external, inCall, topLeaves(leaves, 6))
	require.Positive(t, total, "the profile holds no sample")
	if strings.HasPrefix(c.Path(), "vDSO") && total >= 50 {
		if vdso.RuntimeSeesVDSOPage() {
			assert.Positive(t, inVDSO, "no sample in the vDSO, though the readers spend most of their time there")
		} else {
			// qemu 10: the stock runtime misplaces the vDSO page and
			// charges it to _ExternalCode (call_linux_arm64.go).
			assert.Positive(t, inVDSO+external, "no sample in the vDSO (runtime._VDSO or, where the runtime misplaces the vDSO page, runtime._ExternalCode)")
		}
	}
}

func topLeaves(leaves map[string]int, n int) string {
	type kv struct {
		fn string
		n  int
	}
	var all []kv
	for fn, c := range leaves {
		all = append(all, kv{fn, c})
	}
	for i := range all { // a few entries: selection sort is enough
		for j := i + 1; j < len(all); j++ {
			if all[j].n > all[i].n {
				all[i], all[j] = all[j], all[i]
			}
		}
	}
	var parts []string
	for _, e := range all[:min(n, len(all))] {
		parts = append(parts, fmt.Sprintf("%s %d", e.fn, e.n))
	}
	return strings.Join(parts, ", ")
}

// profileLeaves decodes a gzipped pprof profile just enough to count the
// samples by the function at the top of their stack (the module has no
// dependency that decodes profiles, and the format needs only this).
func profileLeaves(gz []byte) (map[string]int, error) {
	zr, err := gzip.NewReader(bytes.NewReader(gz))
	if err != nil {
		return nil, err
	}
	raw, err := io.ReadAll(zr)
	if err != nil {
		return nil, err
	}
	var strs []string
	funcName := map[uint64]uint64{} // function id -> string index
	locFunc := map[uint64]uint64{}  // location id -> innermost function id
	var samples [][2]uint64         // leaf location id, count
	err = pbEach(raw, func(num int, v uint64, b []byte) error {
		switch num {
		case 2: // Sample: location_id = 1, value = 2
			var loc, count uint64
			var first = true
			err := pbEach(b, func(n int, v uint64, b []byte) error {
				switch {
				case n == 1 && b == nil && first:
					loc, first = v, false
				case n == 1 && b != nil && first:
					ids, err := pbVarints(b)
					if err != nil || len(ids) == 0 {
						return errors.New("bad sample locations")
					}
					loc, first = ids[0], false
				case n == 2 && b == nil && count == 0:
					count = v
				case n == 2 && b != nil && count == 0:
					vals, err := pbVarints(b)
					if err != nil || len(vals) == 0 {
						return errors.New("bad sample values")
					}
					count = vals[0]
				}
				return nil
			})
			samples = append(samples, [2]uint64{loc, count})
			return err
		case 4: // Location: id = 1, line = 4 (Line: function_id = 1)
			var id, fn uint64
			var haveFn bool
			err := pbEach(b, func(n int, v uint64, b []byte) error {
				switch {
				case n == 1:
					id = v
				case n == 4 && !haveFn:
					haveFn = true
					return pbEach(b, func(n int, v uint64, _ []byte) error {
						if n == 1 {
							fn = v
						}
						return nil
					})
				}
				return nil
			})
			locFunc[id] = fn
			return err
		case 5: // Function: id = 1, name = 2
			var id, name uint64
			err := pbEach(b, func(n int, v uint64, _ []byte) error {
				switch n {
				case 1:
					id = v
				case 2:
					name = v
				}
				return nil
			})
			funcName[id] = name
			return err
		case 6:
			strs = append(strs, string(b))
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	leaves := map[string]int{}
	for _, s := range samples {
		name := "?"
		if idx, ok := funcName[locFunc[s[0]]]; ok && idx < uint64(len(strs)) {
			name = strs[idx]
		}
		leaves[name] += int(s[1])
	}
	return leaves, nil
}

// pbEach calls f for each field of a protobuf message: varints with their
// value, length-delimited fields with their bytes (fixed-width ones are
// skipped, a profile has none of interest).
func pbEach(b []byte, f func(num int, v uint64, b []byte) error) error {
	for len(b) > 0 {
		key, n := pbVarint(b)
		if n == 0 {
			return errors.New("bad field key")
		}
		b = b[n:]
		num, wire := int(key>>3), key&7
		switch wire {
		case 0:
			v, n := pbVarint(b)
			if n == 0 {
				return errors.New("bad varint")
			}
			b = b[n:]
			if err := f(num, v, nil); err != nil {
				return err
			}
		case 1, 5:
			w := 8
			if wire == 5 {
				w = 4
			}
			if len(b) < w {
				return errors.New("short fixed field")
			}
			b = b[w:]
		case 2:
			l, n := pbVarint(b)
			if n == 0 || uint64(len(b)-n) < l {
				return errors.New("bad length")
			}
			if err := f(num, 0, b[n:n+int(l)]); err != nil {
				return err
			}
			b = b[n+int(l):]
		default:
			return fmt.Errorf("wire type %d", wire)
		}
	}
	return nil
}

func pbVarint(b []byte) (uint64, int) {
	var v uint64
	for i := 0; i < len(b) && i < 10; i++ {
		v |= uint64(b[i]&0x7f) << (7 * i)
		if b[i] < 0x80 {
			return v, i + 1
		}
	}
	return 0, 0
}

func pbVarints(b []byte) ([]uint64, error) {
	var out []uint64
	for len(b) > 0 {
		v, n := pbVarint(b)
		if n == 0 {
			return nil, errors.New("bad packed varint")
		}
		out = append(out, v)
		b = b[n:]
	}
	return out, nil
}
