// Command service is a small HTTP service timed with the time package:
// the baseline of TestWeight's service comparison.
package main

import (
	"fmt"
	"net/http"
	"os"
	"time"
)

func main() {
	http.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		fmt.Fprintf(w, "hello %v\n", time.Since(start))
	})
	if len(os.Args) > 1 {
		_ = http.ListenAndServe(os.Args[1], nil)
	}
}
