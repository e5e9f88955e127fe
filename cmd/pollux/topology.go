package main

import (
	"fmt"
	"slices"
	"strings"

	"pollux/optimizer"
)

// serverPolicies are the names `pollux server --policy` accepts: auto
// (pollux on one GPU type, pollux-het on several) and the policies of the
// registry that run live.
var serverPolicies = []string{"auto", "pollux", "pollux-het", "sia", "pollux-unaware", "tiresias"}

// serverPolicy is the allocator's policy of `pollux server --policy`: the
// one for rounds on one GPU type and the one for several.
func serverPolicy(name string) (single, typed optimizer.Policy, err error) {
	if !slices.Contains(serverPolicies, name) {
		last := len(serverPolicies) - 1
		return nil, nil, fmt.Errorf("server: --policy %q: want %s or %s", name, strings.Join(serverPolicies[:last], ", "), serverPolicies[last])
	}
	singleName, typedName := name, name
	if name == "auto" {
		singleName, typedName = "pollux", "pollux-het"
	}
	// Jobs measure their restarts: the penalty weighs what they cost.
	opts := optimizer.Options{MeasuredRestart: true}
	if single, err = optimizer.Lookup(singleName, opts); err != nil {
		return nil, nil, fmt.Errorf("server: --policy: %w", err)
	}
	if typed, err = optimizer.Lookup(typedName, opts); err != nil {
		return nil, nil, fmt.Errorf("server: --policy: %w", err)
	}
	return single, typed, nil
}
