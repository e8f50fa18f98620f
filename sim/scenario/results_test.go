package scenario

import "testing"

// TestHopRTTMeanSkipsUnmeasured: a hop whose RTT the client did not
// measure (0) does not pull the node's mean RTT down.
func TestHopRTTMeanSkipsUnmeasured(t *testing.T) {
	r := &Results{Scenario: &Scenario{}, Requests: []RequestResult{
		{Tokens: 3, Route: []RouteHop{{Peer: "a", Layers: "0-6", RTTms: 100}}},
		{Tokens: 3, Route: []RouteHop{{Peer: "a", Layers: "0-6", RTTms: 0}}},
		{Tokens: 3, Route: []RouteHop{{Peer: "a", Layers: "0-6", RTTms: 102}}},
	}}
	r.finish()
	if len(r.Hops) != 1 || r.Hops[0].RTTms != 101 || r.Hops[0].Requests != 3 {
		t.Fatalf("hops %+v, want one with 3 requests and a mean RTT of 101 ms", r.Hops)
	}
}
