package swarm

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/ipfs/go-cid"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/pipeshard/pipeshard/internal/fetch"
	"github.com/pipeshard/pipeshard/internal/route"
	"github.com/pipeshard/pipeshard/internal/status"
	"github.com/pipeshard/pipeshard/ovrt/tokenizer"
	"github.com/pipeshard/pipeshard/shards"
)

// Provider is a peer serving one shard of a model.
type Provider struct {
	Peer   peer.AddrInfo
	Shard  shards.ShardRef
	RTT    time.Duration  // 0 when the ping failed
	Status *status.Record // its latest signed status, if one arrived
}

// fetcher returns the client's bitswap service, starting it on first use.
func (c *Client) fetcher(ctx context.Context) (*fetch.Service, error) {
	c.fetchOnce.Do(func() {
		c.fetch, c.fetchErr = fetch.New(ctx, c.Host, c.DHT, c.Store.Blocks, fetch.WithLogger(c.log))
	})
	return c.fetch, c.fetchErr
}

// get makes sure the stored file k is in the local store, fetching it
// from its providers when needed.
func (c *Client) get(ctx context.Context, k cid.Cid) error {
	if has, err := c.Store.Blocks.Has(ctx, k); err == nil && has {
		return nil
	}
	f, err := c.fetcher(ctx)
	if err != nil {
		return err
	}
	fctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for {
		// Nodes that just started may still be announcing: ask again.
		provs, _ := c.Providers(fctx, k, 8)
		if len(provs) > 0 {
			return f.Fetch(fctx, k, nil, fetch.FromPeers(provs...))
		}
		select {
		case <-fctx.Done():
			return fmt.Errorf("%w: nobody in the swarm provides %s", ErrNotFound, k)
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// Resolve returns the manifest of model mc, fetched from a provider and
// checked against its CID.
func (c *Client) Resolve(ctx context.Context, mc cid.Cid) (*shards.Manifest, error) {
	if err := c.get(ctx, mc); err != nil {
		return nil, fmt.Errorf("swarm: model %s: %w", mc, err)
	}
	return c.Store.Manifest(ctx, mc)
}

// Tokenizer returns the model's tokenizer, fetched by CID.
func (c *Client) Tokenizer(ctx context.Context, m *shards.Manifest) (*tokenizer.Tokenizer, error) {
	if m.Tokenizer.CID == "" {
		return nil, fmt.Errorf("%w: model %s has no tokenizer", ErrNotFound, m.Name)
	}
	k, err := cid.Decode(m.Tokenizer.CID)
	if err != nil {
		return nil, err
	}
	if err := c.get(ctx, k); err != nil {
		return nil, fmt.Errorf("swarm: tokenizer %s: %w", k, err)
	}
	return c.Store.Tokenizer(ctx, m)
}

// Discover finds the providers of every shard of every layout of m and
// measures the round trip to each.
func (c *Client) Discover(ctx context.Context, m *shards.Manifest) ([]Provider, error) {
	// Look every distinct shard up at once: a lookup that finds fewer
	// than its maximum runs until the DHT query ends, so one at a time
	// the lookups of a many-shard model would add up.
	var shs []shards.ShardRef
	seen := map[string]bool{}
	for _, l := range m.Layouts {
		for _, s := range l.Shards {
			if seen[s.CID] {
				continue
			}
			seen[s.CID] = true
			if _, err := cid.Decode(s.CID); err != nil {
				return nil, fmt.Errorf("swarm: shard %q: %w", s.CID, err)
			}
			shs = append(shs, s)
		}
	}
	found := make([][]peer.AddrInfo, len(shs))
	var lookups sync.WaitGroup
	sem := make(chan struct{}, 8)
	for i, s := range shs {
		lookups.Add(1)
		go func() {
			defer lookups.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			fctx, cancel := context.WithTimeout(ctx, 20*time.Second)
			defer cancel()
			found[i], _ = c.Providers(fctx, cid.MustParse(s.CID), 32)
		}()
	}
	lookups.Wait()
	var out []Provider
	for i, s := range shs {
		for _, p := range found[i] {
			out = append(out, Provider{Peer: p, Shard: s})
		}
	}
	// Ping every distinct peer once, concurrently.
	rtts := map[peer.ID]time.Duration{}
	pinged := map[peer.ID]bool{}
	var mu sync.Mutex // guards rtts
	var wg sync.WaitGroup
	for _, p := range out {
		if pinged[p.Peer.ID] {
			continue
		}
		pinged[p.Peer.ID] = true
		wg.Add(1)
		go func(p peer.AddrInfo) {
			defer wg.Done()
			d, err := c.Ping(ctx, p, 3)
			if err != nil {
				c.log.Debug("ping failed", "peer", p.ID.ShortString(), "err", err)
				return
			}
			mu.Lock()
			rtts[p.ID] = d
			mu.Unlock()
		}(p.Peer)
	}
	wg.Wait()
	tr, err := c.Status(m.ModelID)
	for i := range out {
		out[i].RTT = rtts[out[i].Peer.ID]
		if err == nil {
			if r, ok := tr.Get(out[i].Peer.ID); ok && r.ShardCID == out[i].Shard.CID {
				out[i].Status = &r
			}
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Shard.Layers != out[j].Shard.Layers {
			return out[i].Shard.Layers[0] < out[j].Shard.Layers[0]
		}
		return out[i].Peer.ID < out[j].Peer.ID
	})
	return out, nil
}

// RouteInputs turns providers into the routing core's servers and RTTs.
// Compute times come from the shards' costs on the reference profile
// until nodes report measured ones in their status.
func RouteInputs(provs []Provider) ([]route.Server, route.RTT) {
	var servers []route.Server
	rtt := route.Matrix{}
	for _, p := range provs {
		st := p.Shard.Stage()
		id := p.Peer.ID.String()
		s := route.Server{ID: id, Start: st.Start, End: st.End, HeadLo: st.HeadLo, HeadHi: st.HeadHi,
			ComputeMicros: shards.DefaultProfile.Seconds(p.Shard.Work) * 1e6}
		if r := p.Status; r != nil {
			// Measured beats estimated.
			if r.ComputeMicros > 0 {
				s.ComputeMicros = r.ComputeMicros
			}
			s.QueuedTokens, s.Sessions, s.TokensPerSec, s.Draining = r.QueuedTokens, r.ActiveSessions, r.TokensPerSec, r.Draining
		}
		servers = append(servers, s)
		if p.RTT > 0 {
			us := float64(p.RTT.Microseconds())
			rtt[[2]string{"", id}] = us / 2
			rtt[[2]string{id, ""}] = us / 2
		}
	}
	return servers, rtt.RTT
}

// Plan picks the route of least expected latency through the providers.
func (c *Client) Plan(m *shards.Manifest, provs []Provider, exclude map[string]bool) ([]Hop, route.Route, error) {
	servers, rtt := RouteInputs(provs)
	byKey := map[string]Provider{}
	for i, p := range provs {
		byKey[fmt.Sprint(servers[i].ID, servers[i].Range())] = p
	}
	r, err := route.Plan(route.Model{Layers: m.Config.Layers, Vocab: m.Config.Vocab}, servers, rtt, route.Options{Exclude: exclude})
	if err != nil {
		return nil, r, fmt.Errorf("%w: %w", ErrNoRoute, err)
	}
	var hops []Hop
	for _, s := range r.Hops {
		p := byKey[fmt.Sprint(s.ID, s.Range())]
		st := p.Shard.Stage()
		hops = append(hops, Hop{Peer: p.Peer, Shard: p.Shard.CID, Start: st.Start, End: st.End, HeadLo: st.HeadLo, HeadHi: st.HeadHi, RTT: p.RTT})
	}
	return hops, r, nil
}

// FindRoute discovers providers and plans a route, trying again every
// second until one exists or ctx ends: a swarm that just started may
// still be announcing.
func (c *Client) FindRoute(ctx context.Context, m *shards.Manifest, exclude map[string]bool) ([]Hop, route.Route, []Provider, error) {
	for {
		provs, err := c.Discover(ctx, m)
		if err != nil {
			return nil, route.Route{}, nil, err
		}
		hops, r, err := c.Plan(m, provs, exclude)
		if err == nil {
			return hops, r, provs, nil
		}
		select {
		case <-ctx.Done():
			return nil, r, provs, fmt.Errorf("%w (found %d providers)", err, len(provs))
		case <-time.After(time.Second):
		}
	}
}
