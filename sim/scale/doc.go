// Package scale is pipeshard's swarm-scale simulator.
package scale
