package rpc

import (
	"errors"
	"strings"
)

// errTraceParent: a traceparent that is not a W3C Trace Context header value.
var errTraceParent = errors.New(`traceparent must be a W3C Trace Context value "00-<32 hex trace id>-<16 hex parent id>-<2 hex flags>" (lowercase, ids not all zero)`)

// ValidateTraceParent checks a W3C traceparent (https://www.w3.org/TR/trace-context/#traceparent-header):
// version 00 exactly as specified; a later version is accepted by its first four fields, as the
// specification asks of readers; version ff is invalid.
func ValidateTraceParent(s string) error {
	f := strings.Split(s, "-")
	if len(f) < 4 || len(f[0]) != 2 || !lowerHex(f[0]) || f[0] == "ff" || (f[0] == "00" && len(f) != 4) {
		return errTraceParent
	}
	if len(f[1]) != 32 || !lowerHex(f[1]) || strings.Trim(f[1], "0") == "" {
		return errTraceParent
	}
	if len(f[2]) != 16 || !lowerHex(f[2]) || strings.Trim(f[2], "0") == "" {
		return errTraceParent
	}
	if len(f[3]) != 2 || !lowerHex(f[3]) {
		return errTraceParent
	}
	return nil
}

// TraceID returns the trace id of a valid traceparent ("" if s is empty or invalid).
func TraceID(s string) string {
	if ValidateTraceParent(s) != nil {
		return ""
	}
	return strings.Split(s, "-")[1]
}

func lowerHex(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}
