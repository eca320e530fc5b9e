package format

import (
	"strconv"
	"time"
)

// Stamp writes t as time.RFC3339Nano in UTC ("2006-01-02T15:04:05.999999999Z"),
// as t.UTC().Format(time.RFC3339Nano) does, for the times Info's
// messages carry. Any use of time.Time's formatting links the time
// zone database's loader and the layout parser into every binary that
// imports the package; this is a few lines.
func Stamp(t time.Time) string {
	secs, nanos := t.Unix(), t.Nanosecond()
	days, sod := secs/86400, secs%86400
	if sod < 0 {
		days, sod = days-1, sod+86400
	}
	year, month, day := civil(days)
	b := make([]byte, 0, len("-2006-01-02T15:04:05.999999999Z"))
	if year < 0 {
		b = append(b, '-')
		year = -year
	}
	b = appendPadded(b, year, 4)
	b = append(b, '-')
	b = appendPadded(b, month, 2)
	b = append(b, '-')
	b = appendPadded(b, day, 2)
	b = append(b, 'T')
	b = appendPadded(b, sod/3600, 2)
	b = append(b, ':')
	b = appendPadded(b, sod/60%60, 2)
	b = append(b, ':')
	b = appendPadded(b, sod%60, 2)
	if nanos != 0 {
		frac := appendPadded([]byte{'.'}, int64(nanos), 9)
		for frac[len(frac)-1] == '0' {
			frac = frac[:len(frac)-1]
		}
		b = append(b, frac...)
	}
	return string(append(b, 'Z'))
}

// civil converts days since 1970-01-01 to a proleptic Gregorian date
// (Howard Hinnant's days_from_civil, inverted).
func civil(days int64) (year, month, day int64) {
	z := days + 719468
	era := z / 146097
	if z < 0 && z%146097 != 0 {
		era--
	}
	doe := z - era*146097                                  // [0, 146096]
	yoe := (doe - doe/1460 + doe/36524 - doe/146096) / 365 // [0, 399]
	doy := doe - (365*yoe + yoe/4 - yoe/100)               // [0, 365]
	mp := (5*doy + 2) / 153                                // [0, 11], from March
	day = doy - (153*mp+2)/5 + 1
	month = mp + 3
	if month > 12 {
		month -= 12
	}
	year = yoe + era*400
	if month <= 2 {
		year++
	}
	return year, month, day
}

// appendPadded appends v (not negative) in decimal, zero-padded to width.
func appendPadded(b []byte, v int64, width int) []byte {
	s := strconv.FormatInt(v, 10)
	for i := len(s); i < width; i++ {
		b = append(b, '0')
	}
	return append(b, s...)
}
