package node

import (
	"context"

	pubsub "github.com/libp2p/go-libp2p-pubsub"

	"github.com/pipeshard/pipeshard/internal/status"
)

// statusRecord describes the node now, for its signed status.
func (n *Node) statusRecord() status.Record {
	h := n.Header
	s := n.Stage.Snapshot()
	r := status.Record{
		ModelID: h.ModelID, ShardCID: n.cfg.Shard, Start: h.Start, End: h.End, HeadLo: h.HeadLo, HeadHi: h.HeadHi,
		Quant: h.Quant, QueuedTokens: int(s.QueuedTokens), ActiveSessions: n.Stage.Sessions(),
		ComputeMicros: s.DecodeMicros, Version: Version, Draining: n.Stage.Draining(), Addrs: n.Addrs(),
	}
	if n.cfg.Stage.MaxKVBytes > 0 {
		r.FreeKVBytes = max(n.cfg.Stage.MaxKVBytes-n.Stage.KVBytes(), 0)
	}
	if s.ComputeNanos > 0 {
		r.TokensPerSec = float64(s.Tokens) / (float64(s.ComputeNanos) / 1e9)
	} else if s.DecodeMicros > 0 {
		r.TokensPerSec = 1e6 / s.DecodeMicros
	}
	return r
}

// runStatus publishes the node's status on its model's topic until ctx
// ends.
func (n *Node) runStatus(ctx context.Context) {
	p, err := status.NewPublisher(n.PubSub, n.Host, n.Header.ModelID, status.DefaultPublishEvery, n.statusRecord, nil)
	if err != nil {
		n.log.Warn("status publisher", "err", err)
		return
	}
	n.statusPub = p
	p.Run(ctx)
}

func newPubSub(ctx context.Context, n *Node) (*pubsub.PubSub, error) {
	return pubsub.NewGossipSub(ctx, n.Host)
}
