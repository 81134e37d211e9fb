// Package images holds the programs that hack/build-images compiles into the
// offline test images (one static binary per subdirectory). They are test
// fixtures, not part of berth.
package images
