package scenario

import "github.com/pipeshard/pipeshard/ovrt"

func ovrtConfig(sh Shape) ovrt.Config {
	return ovrt.Config{Layers: sh.Layers, Vocab: sh.Vocab, Context: sh.Context}
}
