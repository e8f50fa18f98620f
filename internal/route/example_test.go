package route_test

import (
	"errors"
	"fmt"

	"github.com/pipeshard/pipeshard/internal/route"
)

func Example() {
	m := route.Model{Layers: 32, Vocab: 32000}
	servers := []route.Server{
		// One cut of the model in two...
		{ID: "alice", Start: 0, End: 16, ComputeMicros: 9000},
		{ID: "bob", Start: 16, End: 32, ComputeMicros: 11000},
		// ...and another in three, with the head split.
		{ID: "carol", Start: 0, End: 20, ComputeMicros: 8000},
		{ID: "dave", Start: 20, End: 32, HeadLo: 0, HeadHi: 16000, ComputeMicros: 5000},
		{ID: "erin", Start: 32, End: 32, HeadLo: 16000, HeadHi: 32000, ComputeMicros: 2000, QueuedTokens: 8},
	}
	rtt := route.Matrix{
		{"", "alice"}: 20000, {"", "carol"}: 5000,
		{"alice", "bob"}: 1000, {"carol", "dave"}: 3000, {"dave", "erin"}: 1000,
		{"bob", ""}: 20000, {"erin", ""}: 5000,
	}
	r, err := route.Plan(m, servers, rtt.RTT, route.Options{})
	if err != nil {
		panic(err)
	}
	fmt.Println(r)
	for i, leg := range r.Legs {
		fmt.Printf("  %s: link %.0fµs, compute %.0fµs, queue %.0fµs\n", r.Hops[i].ID, leg.RTTMicros, leg.ComputeMicros, leg.QueueMicros)
	}
	fmt.Printf("  back to the client: %.0fµs\n", r.ReturnMicros)

	// carol fails: route around her.
	r, err = route.Replan(m, servers, rtt.RTT, route.Options{}, "carol")
	fmt.Println(r, err)

	// Without bob there is no way past layer 16.
	_, err = route.Plan(m, servers[:1], rtt.RTT, route.Options{})
	fmt.Println(errors.Is(err, route.ErrNoRoute), err)
	// Output:
	// carol[0:20] → dave[20:32/0:16000] → erin[32:32/16000:32000] (31000µs)
	//   carol: link 5000µs, compute 8000µs, queue 0µs
	//   dave: link 3000µs, compute 5000µs, queue 0µs
	//   erin: link 1000µs, compute 2000µs, queue 2000µs
	//   back to the client: 5000µs
	// alice[0:16] → bob[16:32] (61000µs) <nil>
	// true route: no route covers the model: no live server continues from layer 16
}

func ExampleChoose() {
	m := route.Model{Layers: 32, Vocab: 32000}
	servers := []route.Server{
		{ID: "alice", Start: 0, End: 16, TokensPerSec: 40},
		{ID: "bob", Start: 0, End: 16, TokensPerSec: 40},
		{ID: "carol", Start: 16, End: 32, TokensPerSec: 30},
	}
	// The joining node can hold half the model.
	candidates := []route.Range{{Start: 0, End: 16}, {Start: 16, End: 32}}
	i, scores := route.Choose(m, servers, candidates)
	fmt.Println(candidates[i], scores)
	for _, s := range route.Coverage(m, servers) {
		fmt.Printf("%+v\n", s)
	}
	// Output:
	// 16:32 [80 30]
	// {Head:false Lo:0 Hi:16 TokensPerSec:80 Servers:2}
	// {Head:false Lo:16 Hi:32 TokensPerSec:30 Servers:1}
	// {Head:true Lo:0 Hi:32000 TokensPerSec:30 Servers:1}
}
