package node

import (
	"fmt"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/pipeshard/pipeshard/internal/wire"
)

// Per-peer admission: who may open a session, and how much one peer may
// hold and ask for. admit and serve call these; the state lives in
// Stage.peers.

// peerKey is whom a session is accounted to: its client, and the peer
// that carried its Open. At the first hop the two are the same peer (an
// Open must come from the client it names); a later hop counts the pair,
// so a peer posing as an upstream hop cannot spend another client's
// quota.
type peerKey struct{ from, client peer.ID }

// peerLimits is a stage's per-peer bookkeeping.
type peerLimits struct {
	// pending counts Opens admitted but not yet registered as sessions,
	// by key; guarded by Stage.mu.
	pending map[peerKey]int

	mu      sync.Mutex // guards buckets and swept
	buckets map[peerKey]*bucket
	swept   time.Time
}

// bucket is a token bucket of requests.
type bucket struct {
	tokens float64
	at     time.Time
}

// take spends one request from k's bucket, refilled at rate per second up
// to burst; false when it is empty. A rate of 0 or less takes no limit.
func (l *peerLimits) take(k peerKey, rate float64, burst int, now time.Time) bool {
	if rate <= 0 {
		return true
	}
	burst = max(burst, 1)
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.buckets == nil {
		l.buckets = map[peerKey]*bucket{}
	}
	if now.Sub(l.swept) > time.Minute {
		// A bucket that has refilled is a fresh one: forget it, so the map
		// holds only peers active in the last minute or so.
		for key, b := range l.buckets {
			if b.tokens+now.Sub(b.at).Seconds()*rate >= float64(burst) {
				delete(l.buckets, key)
			}
		}
		l.swept = now
	}
	b := l.buckets[k]
	if b == nil {
		b = &bucket{tokens: float64(burst), at: now}
		l.buckets[k] = b
	}
	b.tokens = min(float64(burst), b.tokens+now.Sub(b.at).Seconds()*rate)
	b.at = now
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}

// openKey checks who sent Open o (from) against the allow list and the
// route, and returns the key its session is accounted to.
func (st *Stage) openKey(o *wire.Open, from peer.ID) (peerKey, error) {
	client, err := peer.IDFromBytes(o.Client)
	if err != nil {
		return peerKey{}, fmt.Errorf("%w: client peer ID: %v", wire.ErrProtocol, err)
	}
	if ok := st.opts.Allowed; ok != nil {
		if !ok(from) {
			return peerKey{}, fmt.Errorf("%w: %s", wire.ErrForbidden, from)
		}
		if !ok(client) {
			return peerKey{}, fmt.Errorf("%w: client %s", wire.ErrForbidden, client)
		}
		for i, h := range o.Route {
			if p, err := peer.IDFromBytes(h.Peer); err != nil || !ok(p) {
				return peerKey{}, fmt.Errorf("%w: hop %d of the route", wire.ErrForbidden, i)
			}
		}
	}
	if o.Hop == 0 && client != from {
		return peerKey{}, fmt.Errorf("%w: an open for client %s sent by %s", wire.ErrForbidden, client, from)
	}
	if o.Hop > 0 {
		if prev, err := peer.IDFromBytes(o.Route[o.Hop-1].Peer); err != nil || prev != from {
			return peerKey{}, fmt.Errorf("%w: an open for hop %d not sent by hop %d", wire.ErrForbidden, o.Hop, o.Hop-1)
		}
	}
	return peerKey{from: from, client: client}, nil
}

// reserve counts a new session of k against the per-peer limits, or
// refuses it; release undoes it once the session is registered or has
// failed. The caller holds st.mu.
func (st *Stage) reserve(k peerKey) error {
	n, maxN := st.peers.pending[k], st.opts.MaxSessionsPerPeer
	for _, s := range st.sessions {
		if s.key() == k {
			n++
		}
	}
	if maxN > 0 && n >= maxN {
		return fmt.Errorf("%w: %d sessions of this peer, at most %d", wire.ErrLimit, n, maxN)
	}
	// Every session may grow to the context: reserve that much.
	per := int64(st.model.Config().Context) * st.model.KVBytesPerPosition()
	if maxKV := st.opts.MaxKVBytesPerPeer; maxKV > 0 && int64(n+1)*per > maxKV {
		return fmt.Errorf("%w: %d sessions of this peer of up to %d KV bytes each, at most %d bytes", wire.ErrLimit, n+1, per, maxKV)
	}
	if st.peers.pending == nil {
		st.peers.pending = map[peerKey]int{}
	}
	st.peers.pending[k]++
	return nil
}

func (st *Stage) release(k peerKey) {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.releaseLocked(k)
}

// releaseLocked is release with st.mu held.
func (st *Stage) releaseLocked(k peerKey) {
	if st.peers.pending[k]--; st.peers.pending[k] <= 0 {
		delete(st.peers.pending, k)
	}
}

// rateLimit spends one request of o's peer.
func (st *Stage) rateLimit(o *wire.Open, from peer.ID) error {
	k := peerKey{from: from, client: peer.ID(o.Client)}
	if !st.peers.take(k, st.opts.RatePerPeer, st.opts.BurstPerPeer, time.Now()) {
		return fmt.Errorf("%w: more than %g requests a second from this peer", wire.ErrLimit, st.opts.RatePerPeer)
	}
	return nil
}

// key is whom s is accounted to.
func (s *session) key() peerKey {
	return peerKey{from: s.up.s.Conn().RemotePeer(), client: peer.ID(s.open.Client)}
}
