package vmclock

import (
	"bytes"
	"encoding/binary"
	"flag"
	"math/big"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// abi is struct vmclock_abi as include/uapi/linux/vmclock-abi.h declares
// it, field by field, for encoding/binary: the reference the fixtures
// and Encode are checked against (binary.Write adds no padding, and the C
// structure has none but its explicit pad[2]).
type abi struct {
	Magic                            uint32
	Size                             uint32
	Version                          uint16
	CounterID                        uint8
	TimeType                         uint8
	SeqCount                         uint32
	DisruptionMarker                 uint64
	Flags                            uint64
	Pad                              [2]uint8
	ClockStatus                      uint8
	LeapSecondSmearingHint           uint8
	TAIOffsetSec                     int16
	LeapIndicator                    uint8
	CounterPeriodShift               uint8
	CounterValue                     uint64
	CounterPeriodFracSec             uint64
	CounterPeriodEsterrorRateFracSec uint64
	CounterPeriodMaxerrorRateFracSec uint64
	TimeSec                          uint64
	TimeFracSec                      uint64
	TimeEsterrorNanosec              uint64
	TimeMaxerrorNanosec              uint64
	VMGenerationCounter              uint64
}

func (a abi) bytes(t testing.TB, region int) []byte {
	var buf bytes.Buffer
	require.NoError(t, binary.Write(&buf, binary.LittleEndian, a))
	return append(buf.Bytes(), make([]byte, region-buf.Len())...)
}

func (a abi) snapshot() Snapshot {
	return Snapshot{
		Magic: a.Magic, Size: a.Size, Version: a.Version, CounterID: a.CounterID, TimeType: a.TimeType, Seq: a.SeqCount,
		DisruptionMarker: a.DisruptionMarker, Flags: a.Flags, ClockStatus: a.ClockStatus, SmearingHint: a.LeapSecondSmearingHint,
		TAIOffsetSec: a.TAIOffsetSec, LeapIndicator: a.LeapIndicator, PeriodShift: a.CounterPeriodShift,
		CounterValue: a.CounterValue, Period: a.CounterPeriodFracSec, PeriodEstError: a.CounterPeriodEsterrorRateFracSec,
		PeriodMaxError: a.CounterPeriodMaxerrorRateFracSec, TimeSec: a.TimeSec, TimeFrac: a.TimeFracSec,
		TimeEstErrorNs: a.TimeEsterrorNanosec, TimeMaxErrorNs: a.TimeMaxerrorNanosec, VMGeneration: a.VMGenerationCounter,
	}
}

const pageSize = 4096

// fixtures are synthetic pages written from the published layout (this
// machine has no vmclock device): what EC2 publishes (a TSC clock in
// TAI, every error valid), an arm64 guest's page free running in UTC,
// and what QEMU and Firecracker publish (markers only). They seed
// FuzzDecode and are checked byte for byte against abi.
var fixtures = map[string]abi{
	"vmclock-tsc-synchronized.bin": {
		Magic: Magic, Size: pageSize, Version: 1, CounterID: CounterX86TSC, TimeType: TimeTAI, SeqCount: 1234,
		DisruptionMarker: 0x5eed_0001, ClockStatus: StatusSynchronized, TAIOffsetSec: 37, CounterPeriodShift: 29,
		Flags:        FlagTAIOffsetValid | FlagPeriodEstErrValid | FlagPeriodMaxErrValid | FlagTimeEstErrValid | FlagTimeMaxErrValid | FlagTimeMonotonic | FlagVMGenCounter,
		CounterValue: 3_000_000_000_000,
		// A 2.9 GHz TSC: 2^93 / 2.9e9 units of 2^-93 s a count.
		CounterPeriodFracSec:             3_415_007_004_925_186_965,
		CounterPeriodEsterrorRateFracSec: 341_500_700_492,   // 0.1 ppm
		CounterPeriodMaxerrorRateFracSec: 3_415_007_004_925, // 1 ppm
		TimeSec:                          1_798_761_637,     // TAI, 2027-01-01T00:00:00Z plus 37 s
		TimeFracSec:                      1 << 63,           // and a half
		TimeEsterrorNanosec:              10_000,
		TimeMaxerrorNanosec:              50_000,
		VMGenerationCounter:              1,
	},
	"vmclock-arm64-freerunning.bin": {
		Magic: Magic, Size: pageSize, Version: 1, CounterID: CounterARMVCNT, TimeType: TimeUTC, SeqCount: 2,
		DisruptionMarker: 7, ClockStatus: StatusFreeRunning, CounterPeriodShift: 29,
		Flags:                            FlagPeriodMaxErrValid | FlagTimeMaxErrValid,
		CounterValue:                     5_000_000_000,
		CounterPeriodFracSec:             0x89705F4136B4A597,           // 1 ns, the specification's example
		CounterPeriodMaxerrorRateFracSec: 0x89705F4136B4A597 / 100_000, // 10 ppm
		TimeSec:                          1_798_761_600,
		TimeMaxerrorNanosec:              2_000_000,
	},
	"vmclock-markers-only.bin": {
		Magic: Magic, Size: pageSize, Version: 1, CounterID: CounterInvalid, SeqCount: 4,
		DisruptionMarker: 0xfeed_beef, Flags: FlagVMGenCounter, VMGenerationCounter: 3,
	},
	"vmclock-being-written.bin": {
		Magic: Magic, Size: pageSize, Version: 1, CounterID: CounterInvalid, SeqCount: 5,
		DisruptionMarker: 0xfeed_bef0, Flags: FlagVMGenCounter, VMGenerationCounter: 3,
	},
}

var update = flag.Bool("update", false, "rewrite testdata's fixtures from the layout")

// TestFixturesAreTheLayout: each fixture file is its declared fields
// encoded as include/uapi/linux/vmclock-abi.h lays them out, byte for
// byte (and -update writes them so); the layout is 112 bytes and the
// fields sit at the header's offsets; Decode reads the fields back and
// Encode writes the same bytes.
func TestFixturesAreTheLayout(t *testing.T) {
	require.Equal(t, Size, binary.Size(abi{}))
	for _, f := range []struct {
		name string
		off  uintptr
	}{
		{"SeqCount", offSeq}, {"DisruptionMarker", offDisruptionMarker}, {"ClockStatus", offClockStatus},
		{"TAIOffsetSec", offTAIOffset}, {"CounterPeriodShift", offPeriodShift}, {"CounterValue", offCounterValue},
		{"TimeSec", offTimeSec}, {"TimeMaxerrorNanosec", offTimeMaxError}, {"VMGenerationCounter", offVMGeneration},
	} {
		field, ok := reflectField(f.name)
		require.True(t, ok, f.name)
		assert.Equal(t, f.off, field, f.name)
	}
	for name, a := range fixtures {
		want := a.bytes(t, pageSize)
		path := filepath.Join("testdata", name)
		if *update {
			require.NoError(t, os.WriteFile(path, want, 0o644))
		}
		got, err := os.ReadFile(path)
		require.NoError(t, err)
		assert.Equal(t, want, got, "%s is not its fields in the published layout", name)
		s, err := Decode(got)
		if a.SeqCount&1 != 0 {
			assert.ErrorIs(t, err, ErrBusy, name)
		} else {
			require.NoError(t, err, name)
		}
		assert.Equal(t, a.snapshot(), s, name)
		enc := make([]byte, pageSize)
		Encode(enc, a.snapshot())
		assert.Equal(t, want, enc, name)
	}
}

// reflectField is the offset of abi's field name, as unsafe.Offsetof
// gives it for the Go struct with the C struct's natural alignment.
func reflectField(name string) (uintptr, bool) {
	var a abi
	offsets := map[string]uintptr{
		"SeqCount": unsafe.Offsetof(a.SeqCount), "DisruptionMarker": unsafe.Offsetof(a.DisruptionMarker),
		"ClockStatus": unsafe.Offsetof(a.ClockStatus), "TAIOffsetSec": unsafe.Offsetof(a.TAIOffsetSec),
		"CounterPeriodShift": unsafe.Offsetof(a.CounterPeriodShift), "CounterValue": unsafe.Offsetof(a.CounterValue),
		"TimeSec": unsafe.Offsetof(a.TimeSec), "TimeMaxerrorNanosec": unsafe.Offsetof(a.TimeMaxerrorNanosec),
		"VMGenerationCounter": unsafe.Offsetof(a.VMGenerationCounter),
	}
	off, ok := offsets[name]
	return off, ok
}

// TestPageOverlaysTheLayout: the Page type's words sit where the layout
// puts them, so that a mapped device reads as Decode reads its bytes.
func TestPageOverlaysTheLayout(t *testing.T) {
	var p Page
	assert.Equal(t, uintptr(Size), unsafe.Sizeof(p))
	assert.Equal(t, uintptr(offSeq), unsafe.Offsetof(p.seq))
	assert.Equal(t, uintptr(offDisruptionMarker), unsafe.Offsetof(p.marker))
	assert.Equal(t, uintptr(offCounterValue), unsafe.Offsetof(p.counter))
	assert.Equal(t, uintptr(offTimeMaxError), unsafe.Offsetof(p.timeME))
	assert.Equal(t, uintptr(offVMGeneration), unsafe.Offsetof(p.vmGen))
	for name := range fixtures {
		raw, err := os.ReadFile(filepath.Join("testdata", name))
		require.NoError(t, err)
		want, wantErr := Decode(raw)
		page := alignedCopy(raw)
		got, _, err := page.Read(nil)
		if wantErr != nil {
			assert.ErrorIs(t, err, ErrBusy, name) // the odd seq_count never settles
			continue
		}
		require.NoError(t, err, name)
		assert.Equal(t, want, got, name)
		marker, gen, err := page.Markers()
		require.NoError(t, err)
		assert.Equal(t, want.DisruptionMarker, marker)
		assert.Equal(t, want.VMGeneration, gen)
	}
}

// alignedCopy copies raw into 8-aligned memory and overlays a Page on
// it.
func alignedCopy(raw []byte) *Page {
	words := make([]uint64, (len(raw)+7)/8)
	buf := unsafe.Slice((*byte)(unsafe.Pointer(&words[0])), len(words)*8)
	copy(buf, raw)
	p, err := FromBytes(buf)
	if err != nil {
		panic(err)
	}
	return p
}

func fixture(t testing.TB, name string) []byte {
	raw, err := os.ReadFile(filepath.Join("testdata", name))
	require.NoError(t, err)
	return raw
}

// TestDecodeRefusesLayoutDefects: every defect of the published layout is
// an error naming it, never a snapshot: a wrong magic, another version, a
// size below the header or beyond the bytes there are, a truncated copy,
// an odd seq_count.
func TestDecodeRefusesLayoutDefects(t *testing.T) {
	good := fixture(t, "vmclock-tsc-synchronized.bin")
	edit := func(f func(b []byte) []byte) []byte { return f(bytes.Clone(good)) }
	for name, tc := range map[string]struct {
		b    []byte
		want error
	}{
		"magic":          {edit(func(b []byte) []byte { b[0] ^= 1; return b }), ErrLayout},
		"version 2":      {edit(func(b []byte) []byte { b[offVersion] = 2; return b }), ErrLayout},
		"version 0":      {edit(func(b []byte) []byte { b[offVersion] = 0; return b }), ErrLayout},
		"size below":     {edit(func(b []byte) []byte { binary.LittleEndian.PutUint32(b[offSize:], MinSize-1); return b }), ErrLayout},
		"size beyond":    {edit(func(b []byte) []byte { binary.LittleEndian.PutUint32(b[offSize:], pageSize+1); return b }), ErrLayout},
		"truncated":      {good[:100], ErrLayout},
		"header only":    {good[:MinSize-1], ErrLayout},
		"empty":          {nil, ErrLayout},
		"odd seq_count":  {edit(func(b []byte) []byte { b[offSeq] |= 1; return b }), ErrBusy},
		"garbage":        {bytes.Repeat([]byte{0xa5}, pageSize), ErrLayout},
		"all zero bytes": {make([]byte, pageSize), ErrLayout},
	} {
		_, err := Decode(tc.b)
		assert.ErrorIs(t, err, tc.want, name)
	}
}

// TestTimeAtRefusesWhatIsNoClock: a well-formed page that gives no time
// here says why, for each way the published layout allows it to, and a
// page whose values cannot be a clock's is refused as implausible: never
// a reading.
func TestTimeAtRefusesWhatIsNoClock(t *testing.T) {
	good, err := Decode(fixture(t, "vmclock-tsc-synchronized.bin"))
	require.NoError(t, err)
	counter := good.CounterValue + 2_900_000_000 // a second later
	_, err = good.TimeAt(counter, CounterX86TSC)
	require.NoError(t, err)
	edit := func(f func(s *Snapshot)) Snapshot { s := good; f(&s); return s }
	for name, tc := range map[string]struct {
		s       Snapshot
		counter uint8
		want    error
	}{
		"another counter":       {good, CounterARMVCNT, ErrNoClock},
		"magic":                 {edit(func(s *Snapshot) { s.Magic = 0 }), CounterX86TSC, ErrLayout},
		"version":               {edit(func(s *Snapshot) { s.Version = 2 }), CounterX86TSC, ErrLayout},
		"size below the header": {edit(func(s *Snapshot) { s.Size = MinSize - 1 }), CounterX86TSC, ErrLayout},
		"markers only":          {edit(func(s *Snapshot) { s.CounterID = CounterInvalid }), CounterInvalid, ErrNoClock},
		"status unknown":        {edit(func(s *Snapshot) { s.ClockStatus = StatusUnknown }), CounterX86TSC, ErrNoClock},
		"status initializing":   {edit(func(s *Snapshot) { s.ClockStatus = StatusInitializing }), CounterX86TSC, ErrNoClock},
		"status unreliable":     {edit(func(s *Snapshot) { s.ClockStatus = StatusUnreliable }), CounterX86TSC, ErrNoClock},
		"status undefined":      {edit(func(s *Snapshot) { s.ClockStatus = 9 }), CounterX86TSC, ErrNoClock},
		"monotonic time":        {edit(func(s *Snapshot) { s.TimeType = TimeMonotonic }), CounterX86TSC, ErrNoClock},
		"smeared time":          {edit(func(s *Snapshot) { s.TimeType = 3 }), CounterX86TSC, ErrNoClock},
		"TAI without offset":    {edit(func(s *Snapshot) { s.Flags &^= FlagTAIOffsetValid }), CounterX86TSC, ErrNoClock},
		"no time maxerror":      {edit(func(s *Snapshot) { s.Flags &^= FlagTimeMaxErrValid }), CounterX86TSC, ErrNoClock},
		"no period maxerror":    {edit(func(s *Snapshot) { s.Flags &^= FlagPeriodMaxErrValid }), CounterX86TSC, ErrNoClock},
		"size without time":     {edit(func(s *Snapshot) { s.Size = endMaxError - 1 }), CounterX86TSC, ErrNoClock},
		"odd seq_count":         {edit(func(s *Snapshot) { s.Seq++ }), CounterX86TSC, ErrBusy},
		"zero period":           {edit(func(s *Snapshot) { s.Period = 0 }), CounterX86TSC, ErrImplausible},
		"shift of 128":          {edit(func(s *Snapshot) { s.PeriodShift = 128 }), CounterX86TSC, ErrImplausible},
		"leap undefined":        {edit(func(s *Snapshot) { s.LeapIndicator = 6 }), CounterX86TSC, ErrImplausible},
		"time past 2242":        {edit(func(s *Snapshot) { s.TimeSec = 1 << 33 }), CounterX86TSC, ErrImplausible},
		"maxerror of centuries": {edit(func(s *Snapshot) { s.TimeMaxErrorNs = 1 << 62 }), CounterX86TSC, ErrImplausible},
		"counter decades away":  {edit(func(s *Snapshot) { s.CounterValue = counter - 1<<62 }), CounterX86TSC, ErrImplausible},
		"before 1970":           {edit(func(s *Snapshot) { s.TimeSec = 0; s.TAIOffsetSec = 37 }), CounterX86TSC, ErrImplausible},
	} {
		_, err := tc.s.TimeAt(counter, tc.counter)
		assert.ErrorIs(t, err, tc.want, name)
	}
}

// refTime is the specification's formula in exact rational arithmetic:
// T1 + P(C − C1) in seconds (UTC: TAI less the offset's magnitude), and
// the maximum error time_maxerror + P_maxerror·|C − C1| in seconds.
func refTime(s Snapshot, counter uint64) (t, maxErr *big.Rat) {
	unit := new(big.Rat).SetFrac(big.NewInt(1), new(big.Int).Lsh(big.NewInt(1), 64+uint(s.PeriodShift)))
	delta := new(big.Int).Sub(new(big.Int).SetUint64(counter), new(big.Int).SetUint64(s.CounterValue))
	if delta.Sign() < 0 && delta.CmpAbs(new(big.Int).Lsh(big.NewInt(1), 63)) > 0 {
		delta.Add(delta, new(big.Int).Lsh(big.NewInt(1), 64)) // the counter wrapped
	} else if delta.Sign() > 0 && delta.Cmp(new(big.Int).Lsh(big.NewInt(1), 63)) >= 0 {
		delta.Sub(delta, new(big.Int).Lsh(big.NewInt(1), 64))
	}
	move := new(big.Rat).Mul(new(big.Rat).SetInt(new(big.Int).Mul(delta, new(big.Int).SetUint64(s.Period))), unit)
	t = new(big.Rat).SetFrac(new(big.Int).SetUint64(s.TimeFrac), new(big.Int).Lsh(big.NewInt(1), 64))
	t.Add(t, new(big.Rat).SetInt(new(big.Int).SetUint64(s.TimeSec)))
	t.Add(t, move)
	if s.TimeType == TimeTAI {
		t.Sub(t, new(big.Rat).SetInt64(int64(abs16(s.TAIOffsetSec))))
	}
	abs := new(big.Int).Abs(delta)
	maxErr = new(big.Rat).Mul(new(big.Rat).SetInt(new(big.Int).Mul(abs, new(big.Int).SetUint64(s.PeriodMaxError))), unit)
	maxErr.Add(maxErr, new(big.Rat).SetFrac(new(big.Int).SetUint64(s.TimeMaxErrorNs), big.NewInt(1e9)))
	return t, maxErr
}

// checkReading holds a reading to the exact formula: the page's time is
// inside [UnixNano, UnixNano+1) ns, and every time the page's bound
// allows around it is inside UnixNano ± MaxErrorNs.
func checkReading(t testing.TB, s Snapshot, counter uint64, r Reading) {
	t.Helper()
	exact, maxErr := refTime(s, counter)
	ns := new(big.Rat).SetFrac(big.NewInt(r.UnixNano), big.NewInt(1e9))
	next := new(big.Rat).SetFrac(big.NewInt(r.UnixNano+1), big.NewInt(1e9))
	require.True(t, ns.Cmp(exact) <= 0 && exact.Cmp(next) < 0, "time %v s rounds to %d ns", exact.FloatString(12), r.UnixNano)
	lo := new(big.Rat).Sub(exact, maxErr)
	hi := new(big.Rat).Add(exact, maxErr)
	loGot := new(big.Rat).SetFrac(big.NewInt(r.UnixNano-int64(r.MaxErrorNs)), big.NewInt(1e9))
	hiGot := new(big.Rat).SetFrac(big.NewInt(r.UnixNano+int64(r.MaxErrorNs)), big.NewInt(1e9))
	require.True(t, loGot.Cmp(lo) <= 0 && hi.Cmp(hiGot) <= 0, "bound [%s, %s] s not inside ±%d ns of %d",
		lo.FloatString(12), hi.FloatString(12), r.MaxErrorNs, r.UnixNano)
}

// TestTimeAtIsTheFormula: readings forward and back of the reference
// counter value, on every fixture that gives a clock, against the
// formula in exact arithmetic (edges, then 2,000 pseudo-random counts up
// to a day away: the roundings up must cover every fraction the
// roundings down lose), and no wider than it by more than the rounding
// (3 ns).
func TestTimeAtIsTheFormula(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, name := range []string{"vmclock-tsc-synchronized.bin", "vmclock-arm64-freerunning.bin"} {
		s, err := Decode(fixture(t, name))
		require.NoError(t, err)
		deltas := []int64{0, 1, -1, 7, -3, 1000, 2_900_000_000, -2_900_000_000, 86_400 * 2_900_000_000, 1 << 40, -(1 << 35)}
		for range 2000 {
			deltas = append(deltas, rng.Int64N(2*86_400*2_900_000_000)-86_400*2_900_000_000)
		}
		for _, delta := range deltas {
			counter := s.CounterValue + uint64(delta)
			r, err := s.TimeAt(counter, s.CounterID)
			require.NoError(t, err, "%s %+d", name, delta)
			checkReading(t, s, counter, r)
			_, maxErr := refTime(s, counter)
			maxNs, _ := new(big.Rat).Mul(maxErr, big.NewRat(1e9, 1)).Float64()
			assert.InDelta(t, maxNs, float64(r.MaxErrorNs), 3, "%s %+d", name, delta)
			assert.Equal(t, s.ClockStatus, r.Status)
		}
	}
	// A leap second near: a second more of bound, either side.
	s, err := Decode(fixture(t, "vmclock-tsc-synchronized.bin"))
	require.NoError(t, err)
	plain, err := s.TimeAt(s.CounterValue, CounterX86TSC)
	require.NoError(t, err)
	for _, leap := range []uint8{LeapPrePos, LeapPreNeg, LeapPos} {
		s.LeapIndicator = leap
		r, err := s.TimeAt(s.CounterValue, CounterX86TSC)
		require.NoError(t, err)
		assert.Equal(t, plain.MaxErrorNs+1e9, r.MaxErrorNs, "leap %d", leap)
	}
	// TAI's offset written either way round is the same UTC.
	s.LeapIndicator = LeapNone
	s.TAIOffsetSec = -37
	r, err := s.TimeAt(s.CounterValue, CounterX86TSC)
	require.NoError(t, err)
	assert.Equal(t, plain.UnixNano, r.UnixNano)
	assert.Equal(t, int64(1_798_761_600_500_000_000), r.UnixNano, "2027-01-01T00:00:00.5Z")
}

// TestShr128 holds the 128-bit shift to big.Int's, rounding up and not.
func TestShr128(t *testing.T) {
	for _, v := range [][2]uint64{{0, 0}, {0, 1}, {1, 0}, {1 << 63, 1}, {^uint64(0), ^uint64(0)}, {12345, 1 << 40}} {
		x := new(big.Int).Or(new(big.Int).Lsh(new(big.Int).SetUint64(v[0]), 64), new(big.Int).SetUint64(v[1]))
		for _, n := range []uint8{0, 1, 31, 63, 64, 65, 100, 127} {
			for _, up := range []bool{false, true} {
				hi, lo := shr128(v[0], v[1], n, up)
				want := new(big.Int).Rsh(x, uint(n))
				if up && new(big.Int).Lsh(want, uint(n)).Cmp(x) != 0 {
					want.Add(want, big.NewInt(1))
				}
				got := new(big.Int).Or(new(big.Int).Lsh(new(big.Int).SetUint64(hi), 64), new(big.Int).SetUint64(lo))
				assert.Equal(t, want.String(), got.String(), "%v >> %d (up %v)", v, n, up)
			}
		}
	}
}
