package pprofdecode

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// realProfile is a CPU profile that runtime/pprof wrote on this project's
// development machine (AMD EPYC KVM guest, 2 vCPUs, Go 1.26) around
// 400 ms of a busy loop; realSamples is the count `go tool pprof -raw`
// gives for it (10 + 1 + 1 samples/count): the reference, a decoder
// written by others.
const (
	realProfile = "cpu-here.pprof"
	realSamples = 12
)

// The reference encoder builds messages field by field, as a protobuf
// writer does, for the decoder to read back.
func key(field uint64, wire int) []byte { return binary.AppendUvarint(nil, field<<3|uint64(wire)) }

func varintField(field, v uint64) []byte {
	return append(key(field, 0), binary.AppendUvarint(nil, v)...)
}

func bytesField(field uint64, b []byte) []byte {
	out := append(key(field, 2), binary.AppendUvarint(nil, uint64(len(b)))...)
	return append(out, b...)
}

// sample encodes a Sample whose values are values, packed or one field
// each, with a location list and a label around them.
func sample(packed bool, values ...uint64) []byte {
	msg := bytesField(1, binary.AppendUvarint(binary.AppendUvarint(nil, 7), 9)) // location_id, packed
	if packed {
		var p []byte
		for _, v := range values {
			p = binary.AppendUvarint(p, v)
		}
		msg = append(msg, bytesField(2, p)...)
	} else {
		for _, v := range values {
			msg = append(msg, varintField(2, v)...)
		}
	}
	return append(msg, bytesField(3, varintField(1, 4))...) // a label
}

func gzipped(t testing.TB, data []byte) []byte {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	_, err := zw.Write(data)
	require.NoError(t, err)
	require.NoError(t, zw.Close())
	return buf.Bytes()
}

// profile encodes a Profile: a sample type, the samples (field 2), fields
// of every other wire type the decoder must skip, and a string table.
func profile(samples ...[]byte) []byte {
	p := bytesField(1, append(varintField(1, 1), varintField(2, 2)...)) // sample_type
	for i, s := range samples {
		p = append(p, bytesField(2, s)...)
		if i == 0 {
			p = append(p, key(20, 1)...) // a fixed64 field
			p = append(p, 1, 2, 3, 4, 5, 6, 7, 8)
			p = append(p, key(21, 5)...) // a fixed32 field
			p = append(p, 1, 2, 3, 4)
		}
	}
	p = append(p, bytesField(6, []byte("samples"))...)
	return append(p, varintField(10, 10_000_000)...) // period
}

func TestSamplesCountsTheFirstValueOfEverySample(t *testing.T) {
	for _, tc := range []struct {
		name    string
		samples [][]byte
		want    int64
	}{
		{"none", nil, 0},
		{"packed", [][]byte{sample(true, 3, 30_000_000), sample(true, 1, 10_000_000)}, 4},
		{"one field each", [][]byte{sample(false, 5, 50_000_000), sample(false, 300, 1)}, 305},
		{"mixed", [][]byte{sample(true, 2, 1), sample(false, 6, 1), sample(true, 1<<20, 7)}, 8 + 1<<20},
	} {
		got, err := Samples(gzipped(t, profile(tc.samples...)))
		require.NoError(t, err, tc.name)
		assert.Equal(t, tc.want, got, tc.name)
	}
}

func TestSamplesOfARealProfile(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("testdata", realProfile))
	require.NoError(t, err)
	got, err := Samples(data)
	require.NoError(t, err)
	assert.Equal(t, int64(realSamples), got)
}

func TestSamplesRefusesBrokenInput(t *testing.T) {
	good := profile(sample(true, 3, 1))
	for name, data := range map[string][]byte{
		"cut in a sample":     good[:len(good)/2],
		"bad key":             {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff},
		"wire type 3":         key(5, 3),
		"short fixed64":       append(key(5, 1), 1, 2),
		"short fixed32":       append(key(5, 5), 1),
		"length past the end": append(key(2, 2), 50, 1),
	} {
		_, err := Samples(gzipped(t, data))
		assert.Error(t, err, name)
	}
	_, err := Samples([]byte("not gzip"))
	assert.Error(t, err)
}

// FuzzSamples: any bytes are decoded without a panic, and a profile the
// reference encoder builds from fuzzed sample values decodes to their
// sum. Seeded with the real profile.
func FuzzSamples(f *testing.F) {
	data, err := os.ReadFile(filepath.Join("testdata", realProfile))
	require.NoError(f, err)
	f.Add(data, uint32(3), uint32(5), true)
	f.Add(gzipped(f, profile(sample(false, 1, 2))), uint32(0), uint32(1<<31), false)
	f.Fuzz(func(t *testing.T, raw []byte, a, b uint32, packed bool) {
		_, _ = Samples(raw)
		_, _ = Samples(gzipped(t, raw))
		got, err := Samples(gzipped(t, profile(sample(packed, uint64(a), 1), sample(!packed, uint64(b)))))
		require.NoError(t, err)
		assert.Equal(t, int64(a)+int64(b), got)
	})
}
