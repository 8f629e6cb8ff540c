// Package upstream monitors adopted sessions (UPS-1..5, SPEC §6): DirCatalog, the
// catalog shipped with the product, a directory of JSONL transcripts; and the Monitor
// service that checks watched links on a fixed cadence and records what a person
// typed upstream as human_direct_message, or upstream_missing when the thread is gone.
package upstream

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/awareness/awareness/internal/awareness"
)

// MaxThreadIDBytes bounds a thread id, which becomes a file name.
const MaxThreadIDBytes = 255

// transcriptExt is the file extension of a thread in a DirCatalog.
const transcriptExt = ".jsonl"

// DirCatalog is a directory of JSONL transcripts, one file <dir>/<threadId>.jsonl per
// thread, in the shape coding agents such as Claude Code write: one JSON object per
// line. A line is a human prompt when it is
//
//	{"type":"user","message":{"role":"user","content":<string or array of blocks>}}
//
// with some non-blank text, a string or the "text" blocks of the array, and none of:
// a tool_result block, "isMeta": true, "isSidechain": true for a sub-agent's prompt,
// "isCompactSummary": true. Assistant lines, other types and malformed lines are not
// human. Markers are byte offsets; only complete lines, ending in '\n', are classified.
type DirCatalog struct {
	id  string
	dir string
}

var _ awareness.Catalog = (*DirCatalog)(nil)

// NewDirCatalog returns the catalog id over dir. id must look like an agent id (KEY-4);
// dir must be an existing directory.
func NewDirCatalog(id, dir string) (*DirCatalog, error) {
	if !awareness.ValidAgentID(id) {
		return nil, fmt.Errorf("catalog id %q is not a valid id ([a-z0-9][a-z0-9_-]{0,63})", id)
	}
	if dir == "" {
		return nil, fmt.Errorf("catalog %s: directory is empty", id)
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("catalog %s: %w", id, err)
	}
	fi, err := os.Stat(abs)
	if err != nil {
		return nil, fmt.Errorf("catalog %s: %w", id, err)
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("catalog %s: %s is not a directory", id, abs)
	}
	return &DirCatalog{id: id, dir: abs}, nil
}

// ID returns the catalog id.
func (c *DirCatalog) ID() string { return c.id }

// Dir returns the catalog's absolute directory.
func (c *DirCatalog) Dir() string { return c.dir }

// ValidateThreadID checks a thread id: 1..255 bytes of UTF-8, no path separator, no
// "..", no leading dot, no control character.
func ValidateThreadID(id string) error {
	switch {
	case id == "":
		return awareness.Errorf(awareness.EINVALID, "threadId is empty")
	case len(id) > MaxThreadIDBytes:
		return awareness.Errorf(awareness.EINVALID, "threadId is %d bytes; the limit is %d", len(id), MaxThreadIDBytes)
	case !utf8.ValidString(id):
		return awareness.Errorf(awareness.EINVALID, "threadId is not valid UTF-8")
	case strings.ContainsAny(id, `/\`) || strings.Contains(id, "..") || strings.HasPrefix(id, "."):
		return awareness.Errorf(awareness.EINVALID, "threadId %q is not a plain file name (no path separators, no \"..\", no leading dot)", id)
	}
	for _, r := range id {
		if unicode.IsControl(r) || r == '\u2028' || r == '\u2029' {
			return awareness.Errorf(awareness.EINVALID, "threadId contains a control character")
		}
	}
	return nil
}

func (c *DirCatalog) path(threadID string) (string, error) {
	if err := ValidateThreadID(threadID); err != nil {
		return "", err
	}
	return filepath.Join(c.dir, threadID+transcriptExt), nil
}

// Resolve finds the thread's file; End is the offset after its last complete line.
func (c *DirCatalog) Resolve(ctx context.Context, threadID string) (awareness.CatalogThread, error) {
	if err := ctx.Err(); err != nil {
		return awareness.CatalogThread{}, awareness.Unavailable(err)
	}
	p, err := c.path(threadID)
	if err != nil {
		return awareness.CatalogThread{}, err
	}
	f, err := os.Open(p)
	if errors.Is(err, fs.ErrNotExist) {
		return awareness.CatalogThread{}, awareness.Errorf(awareness.ENOTFOUND, "thread %q is not in catalog %s", threadID, c.id)
	}
	if err != nil {
		return awareness.CatalogThread{}, unreadable(err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return awareness.CatalogThread{}, unreadable(err)
	}
	if !fi.Mode().IsRegular() {
		return awareness.CatalogThread{}, awareness.Errorf(awareness.ENOTFOUND, "thread %q of catalog %s is not a regular file", threadID, c.id)
	}
	end, err := lastLineEnd(f, fi.Size())
	if err != nil {
		return awareness.CatalogThread{}, unreadable(err)
	}
	return awareness.CatalogThread{ThreadID: threadID, Source: p, End: end}, nil
}

// lastLineEnd returns the offset after the last '\n' among the first size bytes.
func lastLineEnd(r io.ReaderAt, size int64) (int64, error) {
	const chunk = 64 << 10
	buf := make([]byte, chunk)
	for end := size; end > 0; {
		start := max(end-chunk, 0)
		b := buf[:end-start]
		if _, err := r.ReadAt(b, start); err != nil && !errors.Is(err, io.EOF) {
			return 0, err
		}
		if i := bytes.LastIndexByte(b, '\n'); i >= 0 {
			return start + int64(i) + 1, nil
		}
		end = start
	}
	return 0, nil
}

// Scan classifies the complete lines after req.Marker, reading at most req.MaxBytes.
// The thread is Missing when its file does not exist in a catalog directory that
// does, or is no longer a regular file; any other failure is an inconclusive error. A
// window without a complete line that fills req.MaxBytes is a line over the limit:
// the scan is blocked there, since bytes are never skipped unclassified (UPS-5). A
// file shorter than the marker also blocks: the link must be adopted again to rebase.
func (c *DirCatalog) Scan(ctx context.Context, req awareness.ScanRequest) (awareness.ScanResult, error) {
	res := awareness.ScanResult{Next: req.Marker}
	if err := ctx.Err(); err != nil {
		return res, err
	}
	if req.MaxBytes <= 0 || req.Marker < 0 {
		return res, awareness.Errorf(awareness.EINVALID, "scan: marker %d, max bytes %d", req.Marker, req.MaxBytes)
	}
	p, err := c.path(req.ThreadID)
	if err != nil {
		return res, err
	}
	f, err := os.Open(p)
	if errors.Is(err, fs.ErrNotExist) {
		// A missing catalog directory, such as an unmounted volume, says nothing about
		// one thread: inconclusive, so that links are not all removed at once.
		if fi, derr := os.Stat(c.dir); derr != nil || !fi.IsDir() {
			return res, &awareness.Error{Code: awareness.EUNAVAILABLE, Message: "the catalog directory is not available", Err: derr}
		}
		res.Missing = true
		return res, nil
	}
	if err != nil {
		return res, unreadable(err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return res, unreadable(err)
	}
	if !fi.Mode().IsRegular() {
		res.Missing = true
		return res, nil
	}
	size := fi.Size()
	if size < req.Marker {
		res.Blocked = fmt.Sprintf("the transcript is %d bytes, shorter than the marker %d (truncated or replaced); adopt the session again to rebase", size, req.Marker)
		return res, nil
	}
	n := min(size-req.Marker, req.MaxBytes)
	if n == 0 {
		return res, nil
	}
	buf := make([]byte, n)
	got, err := io.ReadFull(io.NewSectionReader(f, req.Marker, n), buf)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) {
		return res, unreadable(err)
	}
	buf = buf[:got]

	off := 0
	for {
		if err := ctx.Err(); err != nil {
			return awareness.ScanResult{Next: req.Marker}, err
		}
		i := bytes.IndexByte(buf[off:], '\n')
		if i < 0 {
			break
		}
		line := buf[off : off+i]
		off += i + 1
		text, at, ok := HumanPrompt(line)
		if !ok || (req.IsOwn != nil && req.IsOwn(text)) {
			continue
		}
		res.Turns++
		res.LastAt = at
	}
	res.Next = req.Marker + int64(off)
	if off == 0 && int64(len(buf)) >= req.MaxBytes {
		res.Blocked = fmt.Sprintf("the transcript line at byte %d is longer than the per-cycle scan limit of %d bytes; monitoring is blocked there (bytes are never skipped unclassified)", req.Marker, req.MaxBytes)
	}
	return res, nil
}

// transcriptLine is the part of a JSONL transcript line that classification reads.
type transcriptLine struct {
	Type             string `json:"type"`
	IsMeta           bool   `json:"isMeta"`
	IsSidechain      bool   `json:"isSidechain"`
	IsCompactSummary bool   `json:"isCompactSummary"`
	Timestamp        string `json:"timestamp"`
	Message          *struct {
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
	} `json:"message"`
}

type contentBlock struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

// userMarker is in every human line; lines without it are not decoded.
var userMarker = []byte(`"user"`)

// HumanPrompt classifies one transcript line without its newline. When the line is a
// human prompt it returns the prompt's text and the line's timestamp, zero when
// absent or malformed.
func HumanPrompt(line []byte) (text string, at time.Time, ok bool) {
	if !bytes.Contains(line, userMarker) {
		return "", time.Time{}, false
	}
	var l transcriptLine
	if err := json.Unmarshal(line, &l); err != nil {
		return "", time.Time{}, false
	}
	if l.Type != "user" || l.IsMeta || l.IsSidechain || l.IsCompactSummary || l.Message == nil || l.Message.Role != "user" {
		return "", time.Time{}, false
	}
	c := bytes.TrimSpace(l.Message.Content)
	switch {
	case len(c) > 0 && c[0] == '"':
		if err := json.Unmarshal(c, &text); err != nil {
			return "", time.Time{}, false
		}
	case len(c) > 0 && c[0] == '[':
		var blocks []contentBlock
		if err := json.Unmarshal(c, &blocks); err != nil {
			return "", time.Time{}, false
		}
		var parts []string
		for _, b := range blocks {
			switch b.Type {
			case "tool_result":
				return "", time.Time{}, false
			case "text":
				parts = append(parts, b.Text)
			}
		}
		text = strings.Join(parts, "\n")
	default:
		return "", time.Time{}, false
	}
	if strings.TrimSpace(text) == "" {
		return "", time.Time{}, false
	}
	if l.Timestamp != "" {
		if t, err := time.Parse(time.RFC3339Nano, l.Timestamp); err == nil {
			at = t
		}
	}
	return text, at, true
}

// unreadable is an inconclusive failure to read a thread. Its message names the
// cause, such as "permission denied", but never the path.
func unreadable(err error) error {
	cause := err
	var pe *fs.PathError
	if errors.As(err, &pe) {
		cause = pe.Err
	}
	return &awareness.Error{Code: awareness.EUNAVAILABLE, Message: "cannot read the upstream transcript: " + cause.Error(), Err: err}
}
