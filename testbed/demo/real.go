package demo

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"pollux/testbed/realdemo"
)

// Real runs the real demo with o (its Exec defaults to this binary, its
// Dir to a temporary directory, removed afterwards unless keep), progress
// on stderr, and prints the result on stdout (JSON with asJSON, else a
// table) whenever the jobs completed, also when the run fell short of
// what it shows (the error then says what).
func Real(ctx context.Context, o realdemo.Options, keep, asJSON bool, stdout, stderr io.Writer) error {
	return runReal(ctx, o, "pollux-demo-real-", keep, asJSON, stdout, stderr, realdemo.Run,
		func(res *realdemo.Result) error { return res.WriteTable(stdout) })
}

// Compare runs realdemo.Compare with o (Exec and Dir as for Real),
// progress on stderr, and prints the comparison on stdout (JSON with
// asJSON, else a table per policy) whenever both runs completed, also
// when they fell short of what the comparison shows.
func Compare(ctx context.Context, o realdemo.Options, keep, asJSON bool, stdout, stderr io.Writer) error {
	return runReal(ctx, o, "pollux-demo-compare-", keep, asJSON, stdout, stderr, realdemo.Compare,
		func(res *realdemo.Comparison) error {
			for _, name := range []string{"pollux", "tiresias"} {
				p := res.Policies[name]
				fmt.Fprintf(stdout, "%s: average JCT %.0f s\n", name, p.AvgJCT)
				if err := (realdemo.Result{Jobs: p.Jobs}).WriteTable(stdout); err != nil {
					return err
				}
			}
			_, err := fmt.Fprintf(stdout, "ratio (pollux / tiresias average JCT): %.3f\n", res.Ratio)
			return err
		})
}

// runReal prepares o, runs it with run and prints what it returned, as JSON
// or with table, unless run failed short of a result.
func runReal[R any](ctx context.Context, o realdemo.Options, prefix string, keep, asJSON bool, stdout, stderr io.Writer,
	run func(context.Context, realdemo.Options) (R, error), table func(*R) error) error {
	done, err := prepare(&o.Exec, &o.Dir, prefix, keep)
	defer done()
	if err != nil {
		return err
	}
	o.Progress = stderr
	start := time.Now()
	res, err := run(ctx, o)
	if err != nil && !errors.Is(err, realdemo.ErrShort) {
		return fmt.Errorf("demo: %w", err)
	}
	fmt.Fprintf(stderr, "done in %.0f s\n", time.Since(start).Seconds())
	if asJSON {
		b, jerr := json.Marshal(res)
		if jerr != nil {
			return fmt.Errorf("demo: %w", jerr)
		}
		fmt.Fprintln(stdout, string(b))
	} else if werr := table(&res); werr != nil {
		return fmt.Errorf("demo: %w", werr)
	}
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	return nil
}
