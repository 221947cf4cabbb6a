// Package lancemanifest reads what steward needs of a Lance manifest without Lance: the
// fragments of a version (id, physical rows) and the index section (each index segment's name,
// uuid and fragment bitmap). The sidecar plans and checks segment builds from it, so that the
// coverage of a segmented index never rests on the engine's word.
//
// It decodes the protobuf messages of Lance's protos/table.proto by field number
// (google.golang.org/protobuf/encoding/protowire) and skips every field it does not name, so a
// newer manifest with more fields still reads. It refuses, with ErrCorrupt, a file without the
// "LANC" trailer, a section outside the file, a malformed message and a fragment bitmap that is
// not a 32-bit portable Roaring bitmap. Every read is bounded (MaxManifestSize, MaxFragments).
//
// File layout (Lance's manifest writer):
//
//	[index section: u32 LE length | IndexSection message]   (optional, at Manifest.index_section)
//	[transaction section ...]                               (optional)
//	[u32 LE length | Manifest message]                      at the metadata position
//	i64 LE metadata position | u16 major | u16 minor | "LANC"   (16 bytes)
package lancemanifest
