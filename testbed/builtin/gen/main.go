// Command gen derives the built-in parametric profiles from the artifact's
// traces (builtin.Derive) and prints them as the JSON list profiles.json
// holds:
//
//	go run ./testbed/builtin/gen --traces ../shared/pollux-artifact/traces > testbed/builtin/profiles.json
package main

import (
	"flag"
	"fmt"
	"os"

	"pollux/testbed/builtin"
)

func main() {
	dir := flag.String("traces", "../shared/pollux-artifact/traces", "trace directory in the artifact layout")
	flag.Parse()
	if err := run(*dir); err != nil {
		fmt.Fprintln(os.Stderr, "gen:", err)
		os.Exit(1)
	}
}

func run(dir string) error {
	ps, err := builtin.Derive(dir)
	if err != nil {
		return err
	}
	out, err := builtin.Encode(ps)
	if err != nil {
		return err
	}
	_, err = fmt.Printf("%s\n", out)
	return err
}
