package tools

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"

	"countersign/internal/tool"
)

// MaxPreview bounds the file a write_file preview keeps: a longer one has no content, only an
// Error saying it is too large.
const MaxPreview = 1 << 20

// writeFilePreview is write_file's tool.PreviewFunc: the file's content when the approval opens
// (at most MaxPreview bytes), or that it is a new file, stored with the approval so the prompt's
// diff never reads the workspace again (issue 19), and the SHA-256 of the whole file then, also
// of one too large to show, which write_file checks before it writes after a person's approval
// (issue 28). A path the jail refuses (outside the workspace) is an error: no preview, no content
// read. A file it cannot show (too large, a folder) is a preview with an Error.
func writeFilePreview(ctx context.Context, arguments json.RawMessage, workspace string) (*tool.Preview, error) {
	var in struct {
		Path string `json:"path"`
	}
	if err := decode(arguments, &in); err != nil {
		return nil, err
	}
	content, exists, digest, err := previewFile(ctx, workspace, in.Path, MaxPreview)
	if err != nil && !exists {
		// The jail refused the path (outside the workspace, through a link) or it cannot be
		// looked at: nothing was read, and there is nothing to show.
		return nil, err
	}
	p := &tool.Preview{Path: in.Path, Exists: exists, Content: content, Digest: digest}
	if err != nil {
		p.Content, p.Error = "", err.Error()
	}
	return p, nil
}

// ReadForPreview reads a workspace file for a prompt's preview (the write_file diff, SPEC §3):
// the content (at most max bytes; longer files are an error), and whether the file exists. A
// path outside the workspace is an error wrapping ErrOutsideWorkspace; nothing is read then.
func ReadForPreview(workspace, p string, max int64) (content string, exists bool, err error) {
	content, exists, _, err = previewFile(context.Background(), workspace, p, max)
	return content, exists, err
}

// previewFile is ReadForPreview with the digest of the file's whole content (sha256Hex; "" for a
// missing file or one that is not a regular file), read from the same open file as the content,
// so the two always agree. A file over max has no content, an error saying it is too large, and
// its digest.
func previewFile(ctx context.Context, workspace, p string, max int64) (content string, exists bool, digest string, err error) {
	j, err := openJail(workspace, nil)
	if err != nil {
		return "", false, "", err
	}
	defer j.Close()
	rel, err := j.resolve(p)
	if err != nil {
		return "", false, "", err
	}
	// Only regular files are opened (a named pipe would block the open; see openRegular).
	fi, err := j.root.Stat(rel)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return "", false, "", nil
	case err != nil:
		return "", false, "", fmt.Errorf("cannot read %s: %w", display(rel), unwrapPath(err))
	case fi.IsDir():
		return "", true, "", fmt.Errorf("%s is a folder", display(rel))
	case !fi.Mode().IsRegular():
		return "", true, "", notRegular(rel, fi.Mode())
	}
	f, fi, err := j.openRegular(rel, os.O_RDONLY, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return "", false, "", nil
	}
	if err != nil {
		return "", true, "", fmt.Errorf("cannot read %s: %w", display(rel), unwrapPath(err))
	}
	defer f.Close()
	if fi.Size() > max {
		digest, err := hashReader(ctx, f)
		if err != nil {
			return "", true, "", fmt.Errorf("cannot read %s: %w", display(rel), unwrapPath(err))
		}
		return "", true, digest, fmt.Errorf("%s is too large to preview (%d bytes)", display(rel), fi.Size())
	}
	b, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return "", true, "", err
	}
	if int64(len(b)) > max { // it grew since the Stat: hash the rest too
		h := sha256.New()
		h.Write(b)
		if _, err := io.Copy(h, ctxReader{ctx, f}); err != nil {
			return "", true, "", fmt.Errorf("cannot read %s: %w", display(rel), unwrapPath(err))
		}
		return "", true, hex.EncodeToString(h.Sum(nil)), fmt.Errorf("%s is too large to preview (more than %d bytes)", display(rel), max)
	}
	return string(b), true, sha256Hex(b), nil
}

// ErrChangedSincePrompt is wrapped by the error of a write_file call a person approved when the
// file is no longer what the prompt's diff was drawn against (SPEC §14 "A person's approval
// binds what they saw"): nothing was written, and the model is told to call again for a new diff.
var ErrChangedSincePrompt = errors.New("changed on disk after the prompt showed its diff")

// unchangedSincePreview checks that the resolved path rel of jail j is still the file preview p
// showed a person: missing if it was missing, and with p.Digest's content if it existed. A
// changed file is an error wrapping ErrChangedSincePrompt, e.g. "notes.txt changed on disk after
// the prompt showed its diff; nothing was written. Call write_file again to see the new diff."
// A preview that holds no digest for an existing file (a folder then; a preview stored before
// digests of a file too large to show) cannot be checked and passes; one stored before digests
// with its content is checked against that content.
func unchangedSincePreview(ctx context.Context, j *jail, rel string, p *tool.Preview) error {
	want := p.Digest
	if want == "" && p.Exists && p.Error == "" {
		want = sha256Hex([]byte(p.Content))
	}
	if p.Exists && want == "" {
		return nil
	}
	changed := fmt.Errorf("%s %w; nothing was written. Call write_file again to see the new diff.", display(rel), ErrChangedSincePrompt)
	fi, err := j.root.Stat(rel)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if p.Exists {
			return changed
		}
		return nil
	case err != nil:
		return fmt.Errorf("cannot read %s: %w", display(rel), unwrapPath(err))
	case !p.Exists || !fi.Mode().IsRegular():
		return changed
	}
	f, _, err := j.openRegular(rel, os.O_RDONLY, 0)
	if err != nil {
		return fmt.Errorf("cannot read %s: %w", display(rel), unwrapPath(err))
	}
	defer f.Close()
	got, err := hashReader(ctx, f)
	if err != nil {
		return fmt.Errorf("cannot read %s: %w", display(rel), unwrapPath(err))
	}
	if got != want {
		return changed
	}
	return nil
}

// sha256Hex is the SHA-256 of b in lowercase hex: the digests of tool.Preview.
func sha256Hex(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

// hashReader is the SHA-256 (lowercase hex) of what r holds, read until EOF or ctx ends.
func hashReader(ctx context.Context, r io.Reader) (string, error) {
	h := sha256.New()
	if _, err := io.Copy(h, ctxReader{ctx, r}); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// ctxReader is r that stops with ctx's error once ctx ends (a large file's hash is cut short
// when the call is stopped).
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

// WriteFileDetails is write_file's details (UI-only, never sent to the model): what the file held
// before the write, so the transcript can show the diff after the fact.
type WriteFileDetails struct {
	PreviousExists   bool   `json:"previousExists"`
	PreviousContent  string `json:"previousContent,omitempty"`
	PreviousTooLarge bool   `json:"previousTooLarge,omitempty"`
}

// maxPreviousContent bounds what write_file keeps of a file's previous content in details.
const maxPreviousContent = 256 << 10
