// Command pollux is the single binary of the project: the control-plane
// server and node agent, the clients of their API, the simulator, the
// model fitter, the benchmarks, the demos and the fault injection. Each
// command maps its flags to a package that does the work.
package main

import (
	"errors"
	"fmt"
	"os"
	"pollux/internal/usage"

	"github.com/spf13/cobra"
)

// subcommands is filled by each subcommand's file in an init function, so
// that every command lives in one file of its own.
var subcommands []func() *cobra.Command

// benchCommands are the children of `pollux bench`.
var benchCommands []func() *cobra.Command

// exactArgs is cobra.ExactArgs with a wrong count as bad input.
func exactArgs(n int) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if err := cobra.ExactArgs(n)(cmd, args); err != nil {
			return usage.Wrap(err)
		}
		return nil
	}
}

func newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:           "pollux",
		Short:         "Pollux: co-adaptive, goodput-optimised deep-learning cluster scheduling",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usage.Wrap(err) })
	bench := &cobra.Command{
		Use:   "bench",
		Short: "Benchmarks that print a table (or JSON)",
	}
	for _, f := range benchCommands {
		bench.AddCommand(f())
	}
	root.AddCommand(bench)
	for _, f := range subcommands {
		root.AddCommand(f())
	}
	return root
}

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	root := newRootCmd()
	root.SetArgs(args)
	err := root.Execute()
	if err == nil {
		return 0
	}
	fmt.Fprintln(os.Stderr, "pollux:", err)
	return exitCode(err)
}

// exitCode is the exit status for err: 0 for none, 2 for bad input, 1
// for any other failure.
func exitCode(err error) int {
	switch {
	case err == nil:
		return 0
	case errors.Is(err, usage.ErrBadSetting):
		return 2
	}
	return 1
}
