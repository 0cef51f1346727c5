package tools

import (
	"context"
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
// diff never reads the workspace again (issue 19). A path the jail refuses (outside the
// workspace) is an error: no preview, no content read. A file it cannot show (too large, a
// folder) is a preview with an Error.
func writeFilePreview(_ context.Context, arguments json.RawMessage, workspace string) (*tool.Preview, error) {
	var in struct {
		Path string `json:"path"`
	}
	if err := decode(arguments, &in); err != nil {
		return nil, err
	}
	content, exists, err := ReadForPreview(workspace, in.Path, MaxPreview)
	if err != nil && !exists {
		// The jail refused the path (outside the workspace, through a link) or it cannot be
		// looked at: nothing was read, and there is nothing to show.
		return nil, err
	}
	p := &tool.Preview{Path: in.Path, Exists: exists, Content: content}
	if err != nil {
		p.Content, p.Error = "", err.Error()
	}
	return p, nil
}

// ReadForPreview reads a workspace file for a prompt's preview (the write_file diff, SPEC §3):
// the content (at most max bytes; longer files are an error), and whether the file exists. A
// path outside the workspace is an error wrapping ErrOutsideWorkspace; nothing is read then.
func ReadForPreview(workspace, p string, max int64) (content string, exists bool, err error) {
	j, err := openJail(workspace, nil)
	if err != nil {
		return "", false, err
	}
	defer j.Close()
	rel, err := j.resolve(p)
	if err != nil {
		return "", false, err
	}
	// Only regular files are opened (a named pipe would block the open; see openRegular).
	fi, err := j.root.Stat(rel)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return "", false, nil
	case err != nil:
		return "", false, fmt.Errorf("cannot read %s: %w", display(rel), unwrapPath(err))
	case fi.IsDir():
		return "", true, fmt.Errorf("%s is a folder", display(rel))
	case !fi.Mode().IsRegular():
		return "", true, notRegular(rel, fi.Mode())
	case fi.Size() > max:
		return "", true, fmt.Errorf("%s is too large to preview (%d bytes)", display(rel), fi.Size())
	}
	f, fi, err := j.openRegular(rel, os.O_RDONLY, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return "", false, nil
	}
	if err != nil {
		return "", true, fmt.Errorf("cannot read %s: %w", display(rel), unwrapPath(err))
	}
	defer f.Close()
	if fi.Size() > max {
		return "", true, fmt.Errorf("%s is too large to preview (%d bytes)", display(rel), fi.Size())
	}
	b, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return "", true, err
	}
	return string(b), true, nil
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
