//go:build !amd64 || purego

package kernels

// Without the amd64 assembly (another architecture, or the purego build
// tag) the portable Go code is the only backend.

func bestBackend() *backend { return genericBackend }

func backends() []*backend { return []*backend{genericBackend} }
