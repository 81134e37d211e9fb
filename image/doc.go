// Package image pulls container images from registries into a local store
// and answers every question about them from memory.
//
// Layout under the image root:
//
//	layers/<chain-id hex>/   one unpacked layer each, usable as an overlay lowerdir
//	layer-records/           one record per committed layer (usage, digests)
//	content/sha256/<hex>     manifests, indexes and configs, by digest
//	images/                  one record per image (tags, digests, layers)
//	leases/                  layers pinned by holders such as containers
//
// Anything whose name starts with ".tmp-" is work in progress; it is never
// part of the store and is removed at the next start.
package image
