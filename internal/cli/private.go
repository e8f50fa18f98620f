package cli

import (
	"context"
	"flag"
	"fmt"
	"path/filepath"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/pnet"

	"github.com/pipeshard/pipeshard/node"
)

// Private swarms: the flags node, swarm and demo share, and the swarm
// keygen and id commands.

// privateFlags declares --swarm-key and --allow.
func privateFlags(fs *flag.FlagSet) {
	fs.String("swarm-key", "", "private swarm: the swarm key `FILE` every member holds (pipeshard swarm keygen makes one); TCP only")
	fs.String("allow", "", "talk only to these peers: a `FILE` with one peer ID a line, or peer IDs separated by commas")
}

// identityFlag declares a client's --identity.
func identityFlag(fs *flag.FlagSet) {
	fs.String("identity", "", "identity key `FILE`, created if missing (default: HOME/identity.key with --swarm-key or --allow, else a fresh identity per run)")
}

// privacy is what the private-swarm flags say.
type privacy struct {
	key   pnet.PSK
	allow []peer.ID // nil: no allow list
}

// lookupString is a flag's value, or "" when fs does not declare it.
func lookupString(fs *flag.FlagSet, name string) string {
	if f := fs.Lookup(name); f != nil {
		return f.Value.String()
	}
	return ""
}

// readPrivacy reads --swarm-key and --allow.
func readPrivacy(fs *flag.FlagSet) (privacy, error) {
	var p privacy
	if f := lookupString(fs, "swarm-key"); f != "" {
		k, err := node.ReadSwarmKey(f)
		if err != nil {
			return p, usagef("--swarm-key: %v", err)
		}
		p.key = k
	}
	if a := lookupString(fs, "allow"); a != "" {
		ids, err := node.ParseAllow(a)
		if err != nil {
			return p, usagef("--allow: %v", err)
		}
		p.allow = ids
	}
	return p, nil
}

// private reports whether p makes a private swarm.
func (p privacy) private() bool { return p.key != nil || p.allow != nil }

// clientIdentity is the key a client runs with: --identity, or the home's
// identity.key in a private swarm (so that nodes can list it), or nil for
// a fresh one.
func clientIdentity(fs *flag.FlagSet, home string, p privacy) (crypto.PrivKey, error) {
	path := lookupString(fs, "identity")
	if path == "" && p.private() {
		path = filepath.Join(home, "identity.key")
	}
	if path == "" {
		return nil, nil
	}
	return node.LoadIdentity(path)
}

func swarmKeygen(ctx context.Context, env *Env, fs *flag.FlagSet) error {
	k, err := node.NewSwarmKey()
	if err != nil {
		return err
	}
	_, err = env.Stdout.Write(k)
	return err
}

func swarmID(ctx context.Context, env *Env, fs *flag.FlagSet) error {
	paths := []string{flagString(fs, "identity")}
	switch {
	case fs.NArg() > 0 && paths[0] != "":
		return usagef("give homes or --identity, not both")
	case fs.NArg() > 0:
		paths = nil
		for _, home := range fs.Args() {
			paths = append(paths, filepath.Join(home, "identity.key"))
		}
	case paths[0] == "":
		paths[0] = filepath.Join(flagString(fs, "home"), "identity.key")
	}
	for _, path := range paths {
		k, err := node.LoadIdentity(path)
		if err != nil {
			return err
		}
		id, err := peer.IDFromPrivateKey(k)
		if err != nil {
			return err
		}
		fmt.Fprintln(env.Stdout, id)
	}
	return nil
}
