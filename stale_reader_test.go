package schedclock

import (
	"sync/atomic"
	"testing"
)

// A reader that loaded an odd seq during one publication and is delayed
// until the writer starts the next one finds the freezer in bank 1 before
// the freezer is published. It must not pin the switch point then: a
// reader still on the published bank can read later. (Found in review;
// this test failed before the freezer was armed by seq.)
func TestStaleReaderPinsFreezerEarly(t *testing.T) {
	for _, op := range []string{"register", "suspend"} {
		t.Run(op, func(t *testing.T) {
			a := &FakeCounter{}
			a.Set(1_000_000)
			c, err := New(a.Source("a", 64, 1e9))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			var staleSeq uint64
			SetStep(c, func(s string) {
				if s == "seq.odd" {
					staleSeq = c.latch.seq.Load() // reader R loads seq here, then is preempted
				}
			})
			c.Update()
			a.Add(500)
			var v1 int64
			pinned := false
			SetStep(c, func(s string) {
				if s == "bank.read" && !pinned {
					pinned = true
					// R resumes: loads bank[seq&1].read (now the freezer) and calls it.
					b := &c.latch.banks[staleSeq&1]
					ptrFunc(atomic.LoadPointer(&b.read))()
					// (R's seq check fails; it retries. Nothing else of R matters.)
					a.Add(1000)
					v1 = c.Now() // reader Q on the old, still-published bank
				}
			})
			b := &FakeCounter{}
			if op == "register" {
				if err := c.Register(b.Source("b", 64, 2e9)); err != nil {
					t.Fatal(err)
				}
			} else {
				c.Suspend()
			}
			SetStep(c, nil)
			v2 := c.Now()
			if v2 < v1 {
				t.Fatalf("time went backwards: %d then %d", v1, v2)
			}
		})
	}
}
