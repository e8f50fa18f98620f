package node

import (
	"slices"
	"strings"

	"github.com/libp2p/go-libp2p/core/peer"
)

// ServedRoute is one session a stage serves: the route its client chose
// and this stage's hop in it.
type ServedRoute struct {
	Session string // the session ID, hex
	Hop     int    // this stage's place in Hops
	Client  string // the client's peer ID
	Hops    []RouteHop
}

// RouteHop is one hop of a ServedRoute.
type RouteHop struct {
	Peer       string // peer ID
	Start, End int    // layers [Start, End)
}

// Routes returns the routes of the sessions the stage serves now, in
// session order.
func (st *Stage) Routes() []ServedRoute {
	st.mu.Lock()
	out := make([]ServedRoute, 0, len(st.sessions))
	for _, s := range st.sessions {
		o := s.open
		r := ServedRoute{Session: s.id.String(), Hop: int(o.Hop), Client: peerString(o.Client)}
		for _, h := range o.Route {
			r.Hops = append(r.Hops, RouteHop{Peer: peerString(h.Peer), Start: int(h.Start), End: int(h.End)})
		}
		out = append(out, r)
	}
	st.mu.Unlock()
	slices.SortFunc(out, func(a, b ServedRoute) int { return strings.Compare(a.Session, b.Session) })
	return out
}

// peerString is the peer ID in b as text, or "" when b is not one.
func peerString(b []byte) string {
	id, err := peer.IDFromBytes(b)
	if err != nil {
		return ""
	}
	return id.String()
}
