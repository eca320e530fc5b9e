package format

import (
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

type stringer struct{ s string }

func (s stringer) String() string { return s.s }

type named int32

func (n named) String() string { return fmt.Sprintf("named(%d)", int32(n)) }

type count uint16

type panicky struct{}

func (panicky) Error() string { panic("boom") }

type nilError struct{}

func (*nilError) Error() string { return "never called" }

// printfOperands are the kinds of operand the library's messages pass,
// and their edges.
var printfOperands = []any{
	"", "abc", "tab\there \"quoted\" ü", []byte("bytes"),
	0, 1, -1, 42, math.MaxInt, math.MinInt, int64(math.MaxInt64), int64(math.MinInt64), int8(-128), int16(300), int32(-7), int64(1 << 40),
	uint(7), uint8(255), uint16(65535), uint32(1 << 31), uint64(math.MaxUint64), uintptr(0x1000),
	0.0, 1.0, -2.5, 1e-7, 123456789.0, 1e21, 1.0 / 3, math.Inf(1), math.Inf(-1), math.NaN(), float32(0.1),
	true, false,
	time.Duration(0), 1500 * time.Microsecond, -time.Second, time.Duration(math.MaxInt64),
	stringer{"str"}, named(5), count(9), errors.New("an error"), io.EOF, os.ErrNotExist,
	panicky{}, (*nilError)(nil), nil,
}

// compositeOperands are printed by %v alone.
var compositeOperands = []any{[]int{1, 2}, struct{ A, B int }{1, 2}, map[string]int{"b": 2, "a": 1}, &struct{ A int }{3}}

// printfDirectives are the directives Sprintf supports.
var printfDirectives = []string{"%v", "%s", "%d", "%q", "%x", "%#x", "%g", "%.3g", "%.0f", "%f", "%+.4f",
	"%e", "%.2e", "%+d", "%+x", "%+#x", "%.2s", "%.3x", "%%"}

// applies says whether Sprintf's directive d applies to a: v to
// anything; s and q to strings, errors and Stringers; d and x to
// integers; g, f and e to floats; a precision to floats alone.
func applies(d string, a any) bool {
	verb, k := d[len(d)-1], reflect.ValueOf(a).Kind()
	switch a.(type) {
	case error, fmt.Stringer:
		k = reflect.String
	}
	switch {
	case strings.Contains(d, "."):
		return (k == reflect.Float32 || k == reflect.Float64) && strings.IndexByte("gfe", verb) >= 0
	case verb == 'v':
		return true
	case verb == 's' || verb == 'q':
		return k == reflect.String
	case verb == 'd' || verb == 'x':
		return reflect.Int <= k && k <= reflect.Uintptr
	}
	return (k == reflect.Float32 || k == reflect.Float64) && strings.IndexByte("gfe", verb) >= 0
}

// TestSprintfIsFmts: every supported directive of every kind of operand
// it applies to is written as fmt writes it; one that does not apply
// writes fmt's %!verb(type=value) mark, with the value as %v writes it.
func TestSprintfIsFmts(t *testing.T) {
	for _, d := range printfDirectives {
		if d == "%%" {
			assert.Equal(t, "<%>", Sprintf("<%%>"))
			continue
		}
		for _, a := range append(printfOperands, compositeOperands...) {
			f := "<" + d + ">"
			if _, ok := a.(panicky); ok && applies(d, a) {
				// A panicking method: written as fmt.Sprint writes it.
				assert.Contains(t, Sprintf(f, a), "PANIC=Error method: boom", f)
			} else if applies(d, a) {
				assert.Equal(t, fmt.Sprintf(f, a), Sprintf(f, a), "Sprintf(%q, %#v)", f, a)
			} else if a != nil {
				assert.Equal(t, "<%!"+d[len(d)-1:]+"("+fmt.Sprintf("%T=", a)+Sprintf("%v", a)+")>", Sprintf(f, a), "Sprintf(%q, %#v)", f, a)
			}
		}
	}
	// Malformed directives, which go vet reports: each is marked, as fmt
	// marks it (operands left over: without their values).
	for f, want := range map[string]string{
		"no directives":   "no directives%!(EXTRA)",
		"%d %s":           "1 %!s(MISSING)",
		"%d":              "1%!(EXTRA)",
		"trailing %":      "trailing %!(NOVERB)%!(EXTRA)",
		"%5d":             "%!5(BADFORMAT)d%!(EXTRA)",
		"%t":              "%!t(BADFORMAT)%!(EXTRA)",
		"%w":              "%!w(*errors.errorString=EOF)",
		"a %s: %q %#x %v": `a b: "c" 0xbeef 3s`,
	} {
		args := []any{1, "extra"}
		switch f {
		case "%w":
			args = []any{io.EOF}
		case "a %s: %q %#x %v":
			args = []any{"b", "c", uint64(0xbeef), 3 * time.Second}
		}
		if f == "%d %s" {
			args = args[:1]
		}
		assert.Equal(t, want, Sprintf(f, args...), f)
	}
}

// TestErrorfIsFmts: the message is fmt.Errorf's, and each %w operand is
// wrapped as fmt wraps it, none when there is no %w.
func TestErrorfIsFmts(t *testing.T) {
	inner, other := errors.New("inner"), errors.New("other")
	for _, c := range []struct {
		f    string
		args []any
		is   []error
	}{
		{"plain %d", []any{3}, nil},
		{"wrapped: %w", []any{inner}, []error{inner}},
		{"%w and %v", []any{inner, other}, []error{inner}},
		{"%w and %w", []any{inner, other}, []error{inner, other}},
		{"nil: %w", []any{nil}, nil},
		{"not an error: %w", []any{3}, nil},
	} {
		want, got := fmt.Errorf(c.f, c.args...), Errorf(c.f, c.args...)
		assert.Equal(t, want.Error(), got.Error(), c.f)
		for _, err := range c.is {
			assert.ErrorIs(t, got, err, c.f)
		}
		if len(c.is) == 1 {
			assert.Equal(t, errors.Unwrap(want), errors.Unwrap(got), c.f)
		}
		if len(c.is) == 0 && c.f != "nil: %w" && c.f != "not an error: %w" {
			assert.Nil(t, errors.Unwrap(got), c.f)
			assert.NotErrorIs(t, got, inner, c.f)
		}
	}
	assert.NotErrorIs(t, Errorf("%w and %v", inner, other), other)
}

// FuzzSprintf: a format of supported directives and literal text, over
// the operands above, writes what fmt writes.
func FuzzSprintf(f *testing.F) {
	f.Add([]byte{0, 1, 2}, "text", uint8(3))
	f.Add([]byte{5, 7, 19}, "ü%", uint8(40))
	f.Fuzz(func(t *testing.T, picks []byte, text string, operand uint8) {
		var format string
		var args []any
		for i, p := range picks {
			d := printfDirectives[int(p)%len(printfDirectives)]
			a := printfOperands[(int(operand)+i)%len(printfOperands)]
			if _, ok := a.(panicky); ok || d != "%%" && !applies(d, a) {
				continue
			}
			format += d + text
			if d != "%%" {
				args = append(args, a)
			}
		}
		// A literal % in text makes a directive of its own; fmt and
		// Sprintf agree on those only within the supported set.
		for i := 0; i < len(text); i++ {
			if text[i] == '%' {
				t.Skip("text holds a directive")
			}
		}
		if want := fmt.Sprintf(format, args...); want != Sprintf(format, args...) {
			t.Fatalf("Sprintf(%q, %#v) = %q, fmt writes %q", format, args, Sprintf(format, args...), want)
		}
	})
}
