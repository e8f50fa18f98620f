package scale

import (
	"encoding/json"
	"flag"
	"fmt"
	"testing"
	"time"
)

var (
	tableNodes    = flag.Int("nodes", 1000, "TestScaleTable: swarm size")
	tableMinutes  = flag.Float64("minutes", 30, "TestScaleTable: simulated minutes")
	tableScenario = flag.String("scenario", "", "TestScaleTable: JSON read over the default config, e.g. '{\"status_period\": \"0s\"}'")
)

// TestScaleTable runs every routing × placement on DefaultConfig (1,000
// nodes, 30 simulated minutes, churn) and, with -v, prints the table of
// docs/sim.md and the wall time it took. The seed is 1 unless -seed says
// otherwise; -scenario changes the config as a scenario file would:
//
//	go test -run TestScaleTable -v ./sim/scale
//	go test -run TestScaleTable -v ./sim/scale -nodes 10000 -seed 7
//	go test -run TestScaleTable -v ./sim/scale -scenario '{"swarm": {"mean_lifetime": "2h"}}'
func TestScaleTable(t *testing.T) {
	seed := uint64(1)
	if *seedFlag != 0 {
		seed = *seedFlag
	}
	cfg := DefaultConfig(*tableNodes, *tableMinutes)
	if *tableScenario != "" {
		if err := json.Unmarshal([]byte(*tableScenario), &cfg); err != nil {
			t.Fatalf("-scenario: %v", err)
		}
	}
	start := time.Now()
	rs, err := Compare(cfg, seed, nil)
	if err != nil {
		t.Fatal(err)
	}
	wall := time.Since(start)
	var events uint64
	for _, r := range rs {
		events += r.Events
		if r.Sessions != r.Completed+r.Failed || r.Unfinished != 0 || r.Sessions == 0 {
			t.Errorf("%v/%v: %d sessions, %d completed, %d failed, %d unfinished", r.Routing, r.Placement, r.Sessions, r.Completed, r.Failed, r.Unfinished)
		}
	}
	if testing.Verbose() {
		fmt.Printf("seed %d: %d nodes, %v simulated with churn (mean lifetime %v), %.2f sessions/s %s\n",
			seed, cfg.Swarm.Nodes, cfg.Duration, cfg.Swarm.MeanLifetime, cfg.Workload.SessionsPerSec, *tableScenario)
		fmt.Print(Table(rs))
		fmt.Printf("%d runs, %d events, %.1f s of wall time on %d parallel runs\n", len(rs), events, wall.Seconds(), min(len(rs), maxProcs()))
	}
}

func BenchmarkRun(b *testing.B) {
	for _, p := range Routings {
		b.Run(fmt.Sprintf("nodes=1000/minutes=30/%v", p), func(b *testing.B) {
			cfg := DefaultConfig(1000, 30)
			cfg.Routing = p
			var r Results
			for b.Loop() {
				var err error
				if r, err = Run(cfg, 1, nil); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(r.Events), "events/op")
			b.ReportMetric(float64(r.Events)*float64(b.N)/b.Elapsed().Seconds(), "events/s")
		})
	}
}
