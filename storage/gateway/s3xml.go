package gateway

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/xml"
	"errors"
	"net/http"
	"strconv"

	"github.com/cba1309c/steward/storage"
)

// s3Error is an S3 error response.
type s3Error struct {
	Status  int    `xml:"-"`
	XMLName string `xml:"Error"`
	Code    string `xml:"Code"`
	Message string `xml:"Message"`
}

func errf(status int, code, msg string) *s3Error {
	return &s3Error{Status: status, Code: code, Message: msg}
}

// upstreamError maps an upstream store's error to the engine's S3 error. The message names
// the kind of failure only: an upstream error may carry the store's endpoint or key id.
func upstreamError(err error) *s3Error {
	switch {
	case errors.Is(err, storage.ErrNotFound):
		return errf(http.StatusNotFound, "NoSuchKey", "no such key")
	case errors.Is(err, storage.ErrExists):
		return errf(http.StatusPreconditionFailed, "PreconditionFailed", "the key exists: objects are never overwritten")
	case errors.Is(err, storage.ErrTooLarge), errors.Is(err, errQuota):
		return errf(http.StatusForbidden, "QuotaExceeded", err.Error())
	case errors.Is(err, storage.ErrCorrupt):
		return errf(http.StatusRequestedRangeNotSatisfiable, "InvalidRange", "range outside the object")
	case errors.Is(err, storage.ErrPermission):
		return errf(http.StatusForbidden, "AccessDenied", "the store refused the sidecar")
	}
	return errf(http.StatusServiceUnavailable, "ServiceUnavailable", "the store did not answer")
}

func writeError(w http.ResponseWriter, r *http.Request, e *s3Error) {
	e.XMLName = ""
	if r.Method == http.MethodHead {
		w.WriteHeader(e.Status)
		return
	}
	writeXML(w, e.Status, struct {
		XMLName   xml.Name `xml:"Error"`
		Code      string
		Message   string
		Resource  string
		RequestId string
	}{Code: e.Code, Message: e.Message, Resource: r.URL.Path, RequestId: requestID()})
}

func writeXML(w http.ResponseWriter, status int, v any) {
	b, err := xml.Marshal(v)
	if err != nil {
		http.Error(w, "encode", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/xml")
	w.Header().Set("Content-Length", strconv.Itoa(len(xml.Header)+len(b)))
	w.WriteHeader(status)
	_, _ = w.Write([]byte(xml.Header))
	_, _ = w.Write(b)
}

func requestID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

type locationConstraint struct {
	XMLName xml.Name `xml:"http://s3.amazonaws.com/doc/2006-03-01/ LocationConstraint"`
}

type listResult struct {
	XMLName               xml.Name       `xml:"http://s3.amazonaws.com/doc/2006-03-01/ ListBucketResult"`
	Name                  string         `xml:"Name"`
	Prefix                string         `xml:"Prefix"`
	Delimiter             string         `xml:"Delimiter,omitempty"`
	StartAfter            string         `xml:"StartAfter,omitempty"`
	ContinuationToken     string         `xml:"ContinuationToken,omitempty"`
	NextContinuationToken string         `xml:"NextContinuationToken,omitempty"`
	KeyCount              int            `xml:"KeyCount"`
	MaxKeys               int            `xml:"MaxKeys"`
	IsTruncated           bool           `xml:"IsTruncated"`
	Contents              []listEntry    `xml:"Contents"`
	CommonPrefixes        []commonPrefix `xml:"CommonPrefixes"`
}

type listEntry struct {
	Key          string `xml:"Key"`
	LastModified string `xml:"LastModified"`
	ETag         string `xml:"ETag"`
	Size         int64  `xml:"Size"`
	StorageClass string `xml:"StorageClass"`
}

type commonPrefix struct {
	Prefix string `xml:"Prefix"`
}

type initiateResult struct {
	XMLName  xml.Name `xml:"http://s3.amazonaws.com/doc/2006-03-01/ InitiateMultipartUploadResult"`
	Bucket   string   `xml:"Bucket"`
	Key      string   `xml:"Key"`
	UploadID string   `xml:"UploadId"`
}

type completeRequest struct {
	Parts []struct {
		PartNumber int    `xml:"PartNumber"`
		ETag       string `xml:"ETag"`
	} `xml:"Part"`
}

type completeResult struct {
	XMLName xml.Name `xml:"http://s3.amazonaws.com/doc/2006-03-01/ CompleteMultipartUploadResult"`
	Bucket  string   `xml:"Bucket"`
	Key     string   `xml:"Key"`
	ETag    string   `xml:"ETag"`
}

type copyResult struct {
	XMLName      xml.Name `xml:"http://s3.amazonaws.com/doc/2006-03-01/ CopyObjectResult"`
	LastModified string   `xml:"LastModified"`
	ETag         string   `xml:"ETag"`
}

type deleteRequest struct {
	Quiet   bool `xml:"Quiet"`
	Objects []struct {
		Key string `xml:"Key"`
	} `xml:"Object"`
}

type deleteResult struct {
	XMLName xml.Name `xml:"http://s3.amazonaws.com/doc/2006-03-01/ DeleteResult"`
	Deleted []struct {
		Key string `xml:"Key"`
	} `xml:"Deleted"`
	Errors []deleteError `xml:"Error"`
}

type deleteError struct {
	Key     string `xml:"Key"`
	Code    string `xml:"Code"`
	Message string `xml:"Message"`
}
