package main

import (
	"bytes"
	"context"
	"regexp"
	"slices"
	"testing"

	"github.com/cba1309c/steward/internal/testing/specdoc"
)

// TestAppendixBListsEveryServeFlag: docs/PROTOCOL.md Appendix B, which hosts configure a sidecar
// from, lists exactly the flags `steward serve` parses, none missing and none extra.
func TestAppendixBListsEveryServeFlag(t *testing.T) {
	var usage bytes.Buffer
	if code := runServe(context.Background(), []string{"-h"}, &usage); code != 2 {
		t.Fatalf("serve -h: exit %d, want 2", code)
	}
	var binary []string
	for _, m := range regexp.MustCompile(`(?m)^  -([a-z0-9-]+)`).FindAllStringSubmatch(usage.String(), -1) {
		binary = append(binary, m[1])
	}
	spec := appendixBFlags(t)
	if len(binary) < 10 || len(spec) < 10 {
		t.Fatalf("parsed %d flags from serve -h and %d from Appendix B: the parsers no longer match their input", len(binary), len(spec))
	}
	for _, f := range binary {
		if !slices.Contains(spec, f) {
			t.Errorf("steward serve --%s is not in docs/PROTOCOL.md Appendix B", f)
		}
	}
	for _, f := range spec {
		if !slices.Contains(binary, f) {
			t.Errorf("docs/PROTOCOL.md Appendix B lists --%s, which steward serve does not parse", f)
		}
	}
}

// appendixBFlags is the first column of Appendix B's flag table.
func appendixBFlags(t *testing.T) []string {
	t.Helper()
	app := specdoc.Protocol(t, "## Appendix B")
	var flags []string
	for _, m := range regexp.MustCompile("(?m)^\\| `--([a-z0-9-]+)` \\|").FindAllStringSubmatch(app, -1) {
		flags = append(flags, m[1])
	}
	return flags
}
