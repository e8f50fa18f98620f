package scale

import (
	"encoding/json"
	"errors"
	"testing"
	"time"
)

// FuzzConfig reads scenario files over a small default: a file either
// fails with ErrBadConfig or gives a config that, if small, runs to the
// end with its sessions and tokens accounted for.
func FuzzConfig(f *testing.F) {
	for _, s := range []string{
		`{}`,
		`{"routing": "random", "placement": "dynamic", "rebalance": {"imbalance": 1, "gain": 1, "period": "10s"}}`,
		`{"swarm": {"nodes": 3, "mean_lifetime": "20s", "count_loading": true}, "workload": {"sessions_per_sec": 1, "timeout": "30s"}}`,
		`{"swarm": {"nodes": 0, "fixed": [{"region": 1, "stage": {"Start": 0, "End": 80}, "die_at": "10s"}]}, "workload": {"scripted": [{"at": 1}]}}`,
		`{"model": {"shape": "stories", "quant": "f32", "stages": [1, 3, 6]}, "network": {"regions": [{"name": "x", "weight": 1}], "rtt": [["1ms"]]}}`,
		`{"model": {"layers": 4, "stages": [2, 9]}}`,
		`{"duration": "-1s"}`, `{"warmup": "1h"}`, `{"swarm": {"memory_gb": [0, 1]}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg := DefaultConfig(20, 1)
		cfg.Drain = Duration(2 * time.Minute)
		cfg.Workload.Timeout = cfg.Drain
		err := json.Unmarshal(data, &cfg)
		if err == nil {
			err = cfg.Validate()
		}
		var syn *json.SyntaxError
		var typ *json.UnmarshalTypeError
		if err != nil {
			if !errors.Is(err, ErrBadConfig) && !errors.As(err, &syn) && !errors.As(err, &typ) {
				t.Fatalf("%s: %v is not ErrBadConfig nor a JSON error", data, err)
			}
			return
		}
		w := cfg.Workload
		if cfg.Swarm.Nodes+len(cfg.Swarm.Fixed) > 40 || cfg.Duration+cfg.Drain > Duration(10*time.Minute) ||
			w.SessionsPerSec > 2 || len(w.Scripted) > 20 || w.PromptTokens+w.Tokens > 200 || len(cfg.Network.Regions) > 10 ||
			(cfg.Swarm.MeanLifetime > 0 && cfg.Swarm.MeanLifetime < Duration(10*time.Second)) {
			return // valid, but too big to run here
		}
		_, r := simulate(t, cfg, 1)
		if r.Sessions != r.Completed+r.Failed+r.Unfinished ||
			r.Tokens != int64(r.Completed*w.Tokens)+r.FailedTokens+r.UnfinishedTokens {
			t.Fatalf("%s: accounts do not balance: %+v", data, r)
		}
	})
}
