package lancemanifest

import "errors"

// ErrCorrupt: the bytes are not a Lance manifest this package can read (a bad trailer, a section
// outside the file, a malformed message, a bitmap that is not portable Roaring, or a bound
// exceeded). The manifest was not trusted for anything.
var ErrCorrupt = errors.New("lancemanifest: not a readable Lance manifest")

// ErrNotFound: the dataset has no manifest of the version under any naming Lance uses.
var ErrNotFound = errors.New("lancemanifest: version not found")
