package node

import "github.com/libp2p/go-libp2p/core/protocol"

func protocolID(s string) protocol.ID { return protocol.ID(s) }
