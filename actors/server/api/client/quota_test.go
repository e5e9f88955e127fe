package client_test

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"pollux/actors/server/api"
	"pollux/actors/server/api/client"
)

// TestQuotas: an admin sets a token's quota and the state budget and
// lists them, as pollux acl quota does; a read token is refused.
func TestQuotas(t *testing.T) {
	srv, fb := newServer()
	defer srv.Close()
	ctx := context.Background()
	admin := newClient(t, client.Config{Servers: []string{srv.URL}, Token: adminSecret})
	if _, err := admin.SetQuota(ctx, api.SetQuota{Accessor: "acc-read", Quota: api.Quota{Jobs: 7, Rate: 2}}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.SetQuota(ctx, api.SetQuota{StateBudget: 1 << 20}); err != nil {
		t.Fatal(err)
	}
	if q := fb.LocalState().Quotas.Of("acc-read"); q.Jobs != 7 || q.Rate != 2 {
		t.Errorf("quota in the state %+v", q)
	}
	qs, err := admin.Quotas(ctx)
	if err != nil || qs.StateBudget != 1<<20 || len(qs.Tokens) != 2 {
		t.Fatalf("quotas %+v, %v", qs, err)
	}
	var out bytes.Buffer
	if err := client.WriteQuotas(&out, qs); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"state: 0 of 1048576 bytes", "grafana *", "0/7"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, out.String())
		}
	}
	reader := newClient(t, client.Config{Servers: []string{srv.URL}, Token: readSecret})
	if _, err := reader.SetQuota(ctx, api.SetQuota{Accessor: "acc-read", Quota: api.Quota{Jobs: 1000}}); err == nil || !strings.Contains(err.Error(), "403") {
		t.Errorf("a read token sets its own quota: %v", err)
	}
}
