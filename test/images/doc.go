// Package images holds the programs that hack/build-images compiles into the
// offline test images, and hack/kind-images into the images a kind node
// preloads (one static binary per subdirectory). They are not part of berth.
package images
