package sim

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"

	"pollux/optimizer"
	"pollux/testbed"
	"pollux/testbed/trace"
	"pollux/testbed/workload"
)

type recApp struct {
	testbed.Application
	mu   *sync.Mutex
	seen map[string]bool
	over map[string][2]float64
}

func (a recApp) StepTimes(p []int, m float64) (float64, float64) {
	norm := testbed.NormalizePlacement(p)
	key := fmt.Sprintf("%s %s %g", a.Name(), testbed.PlacementKey(norm), m)
	a.mu.Lock()
	a.seen[key] = true
	v, ok := a.over[key]
	a.mu.Unlock()
	if ok {
		return v[0], v[1]
	}
	x, y := a.Application.StepTimes(p, m)
	a.mu.Lock()
	vals[key] = [2]float64{x, y}
	a.mu.Unlock()
	return x, y
}

var vals = map[string][2]float64{}

func TestZZInterp(t *testing.T) {
	mode := os.Getenv("ZZ")
	if mode == "" {
		t.Skip()
	}
	cat0, _ := trace.Load("../../../shared/pollux-artifact/traces")
	mu := &sync.Mutex{}
	seen := map[string]bool{}
	over := map[string][2]float64{}
	if mode == "replay" {
		f, _ := os.Open("/tmp/zz_ref.txt")
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			fs := strings.Fields(sc.Text())
			a, _ := strconv.ParseFloat(fs[3], 64)
			b, _ := strconv.ParseFloat(fs[4], 64)
			over[strings.Join(fs[:3], " ")] = [2]float64{a, b}
		}
	}
	cat := testbed.Catalog{}
	for n, a := range cat0 {
		cat[n] = recApp{a, mu, seen, over}
	}
	wls, _ := workload.Load("../../../shared/pollux-artifact/workloads", nil)
	for _, pol := range []optimizer.Policy{optimizer.Tiresias{}, optimizer.Optimus{}} {
		for _, wl := range wls {
			res, err := Run(context.Background(), DefaultConfig(), cat, wl, pol, ModeFor(pol.Name()), nil)
			if err != nil {
				t.Fatal(err)
			}
			fmt.Println(pol.Name(), wl.Name, res.Metrics.AvgJCT)
		}
	}
	if mode == "vals" {
		f, _ := os.Create("/tmp/zz_vals.txt")
		for k, v := range vals {
			fmt.Fprintln(f, k, v[0], v[1])
		}
		f.Close()
	}
	if mode == "record" || mode == "replay" {
		f, _ := os.Create("/tmp/zz_queries.txt")
		for k := range over {
			seen[k] = true
		}
		for k := range seen {
			fmt.Fprintln(f, k)
		}
		f.Close()
	}
}
