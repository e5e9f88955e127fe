package suite

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"text/tabwriter"
	"time"

	"pollux/testbed/chaos/attack"
)

// Attack runs the attack scenario and prints its result; it fails
// unless every attack was refused and a normal job completed after them.
func Attack(ctx context.Context, o attack.Options, jsonOut bool, w io.Writer) error {
	res, err := attack.Run(ctx, o)
	if res != nil {
		if perr := printAttack(res, jsonOut, w); perr != nil && err == nil {
			err = perr
		}
		if res.After != nil {
			o.Logger.Error("chaos: after the attacks", "err", res.After)
		}
		if res.Dir != "" {
			o.Logger.Warn("chaos: the attack run is kept", "dir", res.Dir)
		}
	}
	switch {
	case err != nil:
		return fmt.Errorf("%w: %w", ErrFailed, err)
	case !res.Pass():
		return fmt.Errorf("%w: %d of %d attacks got through or changed the state; normal job after them: %s", ErrFailed,
			res.Succeeded, res.Attacks, errOrOK(res.After))
	}
	return nil
}

func errOrOK(err error) string {
	if err == nil {
		return "completed"
	}
	return err.Error()
}

// printAttack prints the attack scenario's result: its JSON, or a table.
func printAttack(res *attack.Result, jsonOut bool, w io.Writer) error {
	if jsonOut {
		b, err := json.Marshal(res)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintln(w, string(b))
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "attack\trefused\thow")
	names := make([]string, 0, len(res.Cases))
	for name := range res.Cases {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		c := res.Cases[name]
		fmt.Fprintf(tw, "%s\t%t\t%s\n", name, c.Refused, c.How)
	}
	fmt.Fprintf(tw, "\n%d attacks, %d refused, %d succeeded; the normal job after them: %s (%v)\n", res.Attacks, res.Refused,
		res.Succeeded, errOrOK(res.After), res.Elapsed.Round(time.Second))
	return tw.Flush()
}
