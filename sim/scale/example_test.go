package scale_test

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/pipeshard/pipeshard/sim/scale"
)

func ExampleRun() {
	cfg := scale.DefaultConfig(200, 10) // 200 nodes, 10 simulated minutes, churn
	cfg.Routing = scale.ThroughputAware
	const seed = 1
	res, err := scale.Run(cfg, seed, func(sim, wall time.Duration) {
		// called about once per simulated minute
	})
	if err != nil {
		panic(err)
	}
	fmt.Println("seed", res.Seed, "every session ended:", res.Completed+res.Failed == res.Sessions)
	// Output: seed 1 every session ended: true
}

func ExampleCompare() {
	cfg := scale.DefaultConfig(1000, 30)
	// A scenario file names what it changes.
	if err := json.Unmarshal([]byte(`{"swarm": {"mean_lifetime": "2h"}}`), &cfg); err != nil {
		panic(err)
	}
	rs, err := scale.Compare(cfg, 1, nil) // every routing × placement
	if err != nil {
		panic(err)
	}
	fmt.Print(scale.Table(rs))
}
