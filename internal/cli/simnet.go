package cli

import (
	"context"

	"github.com/pipeshard/pipeshard/sim/netem"
	"github.com/pipeshard/pipeshard/sim/scenario"
)

// sim run emulates its scenario's WAN with sim/netem: network namespaces
// joined by the kernel's netem where it has it, else by netem's userspace
// delay line.
func init() { startNetwork = startNetem }

func startNetem(ctx context.Context, s scenario.NetSpec) (scenario.Network, error) {
	n, err := netem.Start(ctx, netem.Spec{
		Hosts: s.Hosts,
		Link: func(from, to int) netem.Link {
			l := s.Link(from, to)
			return netem.Link{Delay: l.Delay, Jitter: l.Jitter, Loss: l.Loss, Rate: l.Rate}
		},
		Backend: s.Backend, Seed: s.Seed, MaxDuration: s.MaxDuration, MaxBytes: s.MaxBytes, TCP: s.TCP, Log: s.Log,
	})
	if err != nil {
		return nil, err
	}
	return n, nil
}
