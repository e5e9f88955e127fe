package main

import (
	"strings"
	"testing"

	"pollux/testbed/chaos/attack"
)

// TestAttackScenarioFederation runs a peer lab's attacks on two
// federated labs: the borrower renewing or granting itself the lender's
// node or ordering workers on one it does not lease, a flood of the
// lender's federation port, and the borrower lost while it holds the
// lease. Each is refused
// on the lender's side (its log naming the borrower, its ledger), and
// the lender's own job runs on its node after the loss.
func TestAttackScenarioFederation(t *testing.T) {
	if testing.Short() {
		t.Skip("starts two federated labs and attacks one")
	}
	var only []string
	for _, name := range attack.Names() {
		if strings.HasPrefix(name, "federation-") || name == "flood-federation" {
			only = append(only, name)
		}
	}
	res := runAttackCases(t, only)
	if !res.Pass() || res.Attacks != len(only) || len(only) < 6 {
		t.Errorf("%d attacks of %d, %d refused", res.Attacks, len(only), res.Refused)
	}
}
