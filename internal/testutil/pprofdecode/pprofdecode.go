// Package pprofdecode counts the samples in a pprof profile, for tests
// that must know how many SIGPROFs a run received (the stress suite's
// flood). It reads the protobuf wire format directly, so the tests need
// no profile package (the module's only dependencies are x/sys and, for
// tests, testify).
package pprofdecode

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// Samples counts the samples in a gzipped pprof profile: the first value
// of every Sample (field 2 of Profile; its values are field 2 of Sample,
// packed or not). For a CPU profile that is the number of SIGPROFs it
// recorded.
func Samples(gzipped []byte) (int64, error) {
	zr, err := gzip.NewReader(bytes.NewReader(gzipped))
	if err != nil {
		return 0, err
	}
	data, err := io.ReadAll(zr)
	if err != nil {
		return 0, err
	}
	var total int64
	err = fields(data, func(field uint64, wire int, v uint64, msg []byte) error {
		if field != 2 || wire != 2 {
			return nil
		}
		first := true
		return fields(msg, func(field uint64, wire int, v uint64, packed []byte) error {
			if field != 2 || !first {
				return nil
			}
			first = false
			if wire == 0 {
				total += int64(v)
				return nil
			}
			n, k := binary.Uvarint(packed)
			if k <= 0 {
				return errors.New("bad packed sample value")
			}
			total += int64(n)
			return nil
		})
	})
	return total, err
}

// fields calls fn for every field of a protobuf message: its number, wire
// type, and value (varint) or bytes (length-delimited).
func fields(data []byte, fn func(field uint64, wire int, v uint64, b []byte) error) error {
	for len(data) > 0 {
		key, k := binary.Uvarint(data)
		if k <= 0 {
			return errors.New("bad protobuf key")
		}
		data = data[k:]
		field, wire := key>>3, int(key&7)
		var v uint64
		var b []byte
		switch wire {
		case 0:
			v, k = binary.Uvarint(data)
			if k <= 0 {
				return errors.New("bad protobuf varint")
			}
			data = data[k:]
		case 1:
			if len(data) < 8 {
				return errors.New("short protobuf fixed64")
			}
			data = data[8:]
		case 2:
			n, k := binary.Uvarint(data)
			if k <= 0 || uint64(len(data)-k) < n {
				return errors.New("bad protobuf length")
			}
			b, data = data[k:k+int(n)], data[k+int(n):]
		case 5:
			if len(data) < 4 {
				return errors.New("short protobuf fixed32")
			}
			data = data[4:]
		default:
			return fmt.Errorf("protobuf wire type %d", wire)
		}
		if err := fn(field, wire, v, b); err != nil {
			return err
		}
	}
	return nil
}
