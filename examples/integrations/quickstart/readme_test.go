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
	beginMarker = "// README Quick start: begin"
	endMarker   = "// README Quick start: end"
)

// TestReadmeQuickStart fails unless the README's Go block under
// "## Quick start" is, line for line, the code between the markers in
// quickstart.go: code that this module builds, vets and tests.
func TestReadmeQuickStart(t *testing.T) {
	src, err := os.ReadFile("quickstart.go")
	require.NoError(t, err)
	want, err := between(src, beginMarker, endMarker)
	require.NoError(t, err, "quickstart.go")

	doc, err := os.ReadFile(*readme)
	require.NoError(t, err)
	got, err := quickStartBlock(doc)
	require.NoError(t, err, *readme)

	if !assert.Equal(t, want, got, "the README's Quick start differs from quickstart.go") {
		t.Logf("the block the README should hold:\n```go\n%s```", strings.Join(want, ""))
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

// quickStartBlock returns the lines of the first ```go block under the
// "## Quick start" heading, before the next heading of that level.
func quickStartBlock(doc []byte) ([]string, error) {
	var lines []string
	section, inside := false, false
	sc := bufio.NewScanner(bytes.NewReader(doc))
	for sc.Scan() {
		line := sc.Text()
		switch {
		case !section:
			section = line == "## Quick start"
		case inside && line == "```":
			return lines, nil
		case inside:
			lines = append(lines, line+"\n")
		case strings.HasPrefix(line, "## "):
			return nil, fmt.Errorf("no ```go block under ## Quick start")
		case line == "```go":
			inside = true
		}
	}
	if !section {
		return nil, fmt.Errorf("no ## Quick start heading")
	}
	return nil, fmt.Errorf("the ```go block under ## Quick start is not closed")
}
