// Command pipeshard serves large language models from swarms of
// ordinary PCs. See README.md and `pipeshard --help`; main.go is a thin
// wrapper over internal/cli, which calls the packages ovrt, shards, node
// and swarm.
package main
