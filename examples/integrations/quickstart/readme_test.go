package quickstart_test

import (
	"bufio"
	"bytes"
	"flag"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var readme = flag.String("readme", "../../../README.md", "the README whose Quick start must match quickstart.go")

const (
	beginMarker     = "// README Quick start: begin"
	endMarker       = "// README Quick start: end"
	testBeginMarker = "// README Quick start test: begin"
	testEndMarker   = "// README Quick start test: end"
)

// TestReadmeQuickStart fails unless the README's Go blocks under
// "## Quick start" are, line for line, the code between the markers in
// quickstart.go, then in quickstart_test.go: code that this module
// builds, vets and tests.
func TestReadmeQuickStart(t *testing.T) {
	doc, err := os.ReadFile(*readme)
	require.NoError(t, err)
	for i, file := range []string{"quickstart.go", "quickstart_test.go"} {
		src, err := os.ReadFile(file)
		require.NoError(t, err)
		begin, end := beginMarker, endMarker
		if i == 1 {
			begin, end = testBeginMarker, testEndMarker
		}
		want, err := between(src, begin, end)
		require.NoError(t, err, file)
		got, err := quickStartBlock(doc, i)
		require.NoError(t, err, *readme)
		if !assert.Equal(t, want, got, "the README's Quick start differs from %s", file) {
			t.Logf("the block the README should hold:\n```go\n%s```", strings.Join(want, ""))
		}
	}
}

// between returns the lines strictly between the lines begin and end,
// less the blank lines gofmt keeps before end.
func between(src []byte, begin, end string) ([]string, error) {
	var lines []string
	inside := false
	sc := bufio.NewScanner(bytes.NewReader(src))
	for sc.Scan() {
		switch line := sc.Text(); {
		case line == begin && !inside:
			inside = true
		case line == end && inside:
			for len(lines) > 0 && lines[len(lines)-1] == "\n" {
				lines = lines[:len(lines)-1]
			}
			return lines, nil
		case inside:
			lines = append(lines, line+"\n")
		}
	}
	return nil, fmt.Errorf("no lines between %q and %q", begin, end)
}

// quickStartBlock returns the lines of the n-th (from 0) ```go block
// under the "## Quick start" heading, before the next heading of that
// level.
func quickStartBlock(doc []byte, n int) ([]string, error) {
	var lines []string
	section, inside := false, false
	sc := bufio.NewScanner(bytes.NewReader(doc))
	for sc.Scan() {
		line := sc.Text()
		switch {
		case !section:
			section = line == "## Quick start"
		case inside && line == "```":
			if n == 0 {
				return lines, nil
			}
			n--
			inside, lines = false, nil
		case inside:
			lines = append(lines, line+"\n")
		case strings.HasPrefix(line, "## "):
			return nil, fmt.Errorf("no ```go block %d under ## Quick start", n)
		case line == "```go":
			inside = true
		}
	}
	if !section {
		return nil, fmt.Errorf("no ## Quick start heading")
	}
	return nil, fmt.Errorf("a ```go block under ## Quick start is not closed")
}
