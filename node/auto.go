package node

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/ipfs/go-cid"

	"github.com/pipeshard/pipeshard/internal/route"
	"github.com/pipeshard/pipeshard/internal/status"
	"github.com/pipeshard/pipeshard/shards"
)

// ErrNothingFits is returned when no shard of the model fits --max-memory.
var ErrNothingFits = fmt.Errorf("node: no shard of the model fits the memory bound")

// chooseShard picks the shard this node should host (--layers auto): of
// the shards the model's layouts define that fit in MaxMemory (with room
// for KV), the one whose layer range the swarm serves with the least
// throughput, counting each server's measured tokens/s from its status
// (Petals' block selection, by throughput rather than presence).
func (n *Node) chooseShard(ctx context.Context) (string, error) {
	mc, err := cid.Decode(n.cfg.Model)
	if err != nil {
		return "", fmt.Errorf("%w: model %q: %v", ErrConfig, n.cfg.Model, err)
	}
	fctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if err := n.Fetch.Fetch(fctx, mc, nil); err != nil {
		return "", fmt.Errorf("node: fetch manifest %s: %w", mc, err)
	}
	m, err := n.Store.Manifest(ctx, mc)
	if err != nil {
		return "", err
	}
	var cands []shards.ShardRef
	seen := map[string]bool{}
	for _, l := range m.Layouts {
		for _, s := range l.Shards {
			if seen[s.CID] {
				continue
			}
			seen[s.CID] = true
			if n.cfg.MaxMemory > 0 && s.Bytes+kvReserve(m, s) > n.cfg.MaxMemory {
				continue
			}
			cands = append(cands, s)
		}
	}
	if len(cands) == 0 {
		return "", fmt.Errorf("%w: %s, --max-memory %d", ErrNothingFits, mc, n.cfg.MaxMemory)
	}
	// Listen to the swarm's status for a few publishing periods.
	tr, err := status.NewTracker(n.PubSub, m.ModelID, status.DefaultTTL, nil)
	if err != nil {
		return "", err
	}
	tctx, stop := context.WithCancel(ctx)
	go tr.Run(tctx)
	wctx, wcancel := context.WithTimeout(ctx, n.cfg.ListenFor)
	<-wctx.Done()
	wcancel()
	records := tr.Records()
	stop()

	var servers []route.Server
	for _, r := range records {
		servers = append(servers, route.Server{ID: r.PeerID.String(), Start: r.Start, End: r.End, HeadLo: r.HeadLo, HeadHi: r.HeadHi,
			ComputeMicros: r.ComputeMicros, TokensPerSec: r.TokensPerSec, Sessions: r.ActiveSessions, Draining: r.Draining})
	}
	ranges := make([]route.Range, len(cands))
	for i, s := range cands {
		st := s.Stage()
		ranges[i] = route.Range{Start: st.Start, End: st.End, HeadLo: st.HeadLo, HeadHi: st.HeadHi}
	}
	i, scores := route.Choose(route.Model{Layers: m.Config.Layers, Vocab: m.Config.Vocab}, servers, ranges)
	if i < 0 {
		return "", fmt.Errorf("%w: no candidate", ErrNothingFits)
	}
	n.log.Info("chose a shard", "shard", cands[i].CID, "layers", cands[i].Stage().String(),
		"servers_seen", len(records), "candidates", len(cands), "score", scores[i], "min_score", slices.Min(scores))
	return cands[i].CID, nil
}

// kvReserve is the KV memory a node keeps for sessions beside a shard:
// one session at full context (float32 keys and values).
func kvReserve(m *shards.Manifest, s shards.ShardRef) int64 {
	layers := int64(s.Layers[1] - s.Layers[0])
	return layers * int64(m.Config.Context) * int64(m.Config.KVDim()) * 2 * 4
}
