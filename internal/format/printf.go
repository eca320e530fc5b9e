package format

import (
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
)

// Sprintf and Errorf are fmt's, for the directives the library's messages
// use: v (of anything), s and q (of strings, errors and Stringers), d
// and x (of integers), g, f and e (of floats), w (Errorf's wrapped
// error), the flags + (numbers) and # (x), a precision (floats), and %%.
// They write what fmt writes for those (a differential test and a fuzz
// target compare them) without fmt's printf machinery, which fmt.Println
// does not link, and which every binary that imports the library would
// otherwise carry (see TestWeight). go vet checks their calls as it
// checks fmt's.
//
// A verb outside that set writes %!verb(BADFORMAT), one that does not
// apply to its operand %!verb(type=value); a missing operand writes
// %!verb(MISSING), and operands left over %!(EXTRA). A panic in an
// operand's Error or String method is written as fmt.Sprint writes it.
func Sprintf(format string, args ...any) string {
	if vetChecks {
		return fmt.Sprintf(format, args...)
	}
	s, _ := printf(format, args, false)
	return s
}

// vetChecks is false: the calls of fmt it guards are never compiled in.
// They tell go vet's printf check that Sprintf and Errorf take fmt's
// formats (vet knows a wrapper by its forwarding call), so that vet
// checks every call of them as it checks fmt's, %w included.
const vetChecks = false

// Errorf is fmt.Errorf: the error's message is Sprintf's, and each %w
// operand that is an error is wrapped (errors.Is and errors.As find it).
func Errorf(format string, args ...any) error {
	if vetChecks {
		return fmt.Errorf(format, args...)
	}
	msg, wrapped := printf(format, args, true)
	if wrapped == nil {
		return errors.New(msg)
	}
	if len(wrapped) == 1 {
		return &wrapError{msg, wrapped}
	}
	return &wrapErrors{msg, wrapped}
}

// wrapError is fmt's for one %w, wrapErrors for several.
type wrapError struct {
	msg  string
	errs []error
}

func (e *wrapError) Error() string { return e.msg }
func (e *wrapError) Unwrap() error { return e.errs[0] }

type wrapErrors wrapError

func (e *wrapErrors) Error() string   { return e.msg }
func (e *wrapErrors) Unwrap() []error { return e.errs }

// printf writes format with args, and returns the errors that %w
// operands wrap where wrap is set (Errorf): nil if there is no %w.
func printf(format string, args []any, wrap bool) (out string, wrapped []error) {
	n := 0
	for {
		pct := strings.IndexByte(format, '%')
		if pct < 0 {
			out += format
			break
		}
		lit, d := format[:pct], format[pct+1:]
		plus, sharp, prec, i := false, false, -1, 0
		for ; i < len(d) && (d[i] == '+' || d[i] == '#'); i++ {
			plus = plus || d[i] == '+'
			sharp = sharp || d[i] == '#'
		}
		if i < len(d) && d[i] == '.' {
			for prec, i = 0, i+1; i < len(d) && '0' <= d[i] && d[i] <= '9'; i++ {
				prec = prec*10 + int(d[i]-'0')
			}
		}
		if i == len(d) {
			out += lit + "%!(NOVERB)"
			break
		}
		verb, s := d[i:i+1], ""
		format = d[i+1:]
		switch {
		case verb == "%":
			s = "%"
		case strings.IndexByte("vsqxdgfew", verb[0]) < 0:
			s = "%!" + verb + "(BADFORMAT)"
		case n == len(args):
			s = "%!" + verb + "(MISSING)"
		case verb == "w":
			if err, ok := args[n].(error); ok && wrap {
				wrapped = append(wrapped, err)
				s = operand(err, 'v', false, false, prec)
			} else {
				s = bad(verb, args[n])
			}
			n++
		default:
			s = operand(args[n], verb[0], plus && verb != "v", sharp, prec)
			n++
		}
		out += lit + s
	}
	if n < len(args) {
		out += "%!(EXTRA)"
	}
	return out, wrapped
}

// operand writes one operand: v and s as fmt.Sprint writes it (s of a
// string, an error or a Stringer alone), q that quoted, d and x an
// integer's digits, g, f and e a float; what does not apply is marked.
func operand(a any, verb byte, plus, sharp bool, prec int) string {
	v := reflect.ValueOf(a)
	k := v.Kind()
	switch a.(type) {
	case error, interface{ String() string }:
		k = reflect.String // as fmt, for v, s and q
	}
	switch {
	case prec >= 0 && verb != 'g' && verb != 'f' && verb != 'e':
	case verb == 'v' || verb == 's' && k == reflect.String:
		return fmt.Sprint(a)
	case verb == 'q' && k == reflect.String:
		return strconv.Quote(fmt.Sprint(a))
	case (verb == 'd' || verb == 'x') && reflect.Int <= k && k <= reflect.Uintptr:
		var u uint64
		s := sign("+", plus)
		switch {
		case k > reflect.Int64:
			u = v.Uint()
		case v.Int() < 0:
			u, s = -uint64(v.Int()), "-"
		default:
			u = uint64(v.Int())
		}
		base := 10
		if verb == 'x' {
			base = 16
			if sharp {
				s += "0x"
			}
		}
		return s + strconv.FormatUint(u, base)
	case (verb == 'g' || verb == 'f' || verb == 'e') && (k == reflect.Float32 || k == reflect.Float64):
		if prec < 0 && verb != 'g' {
			prec = 6
		}
		s := strconv.FormatFloat(v.Float(), verb, prec, v.Type().Bits())
		if s[0] != '+' && s[0] != '-' {
			s = sign("+", plus) + s
		}
		return s
	}
	return bad(string(verb), a)
}

// sign is the sign to write: - always, + where the flag asks for it.
func sign(s string, plus bool) string {
	if s == "+" && !plus {
		return ""
	}
	return s
}

// bad is fmt's %!verb(type=value) for an operand the verb cannot print.
func bad(verb string, a any) string {
	if a == nil {
		return "%!" + verb + "(<nil>)"
	}
	return "%!" + verb + "(" + reflect.TypeOf(a).String() + "=" + fmt.Sprint(a) + ")"
}
